//go:build devchain

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
	"github.com/voucherd/voucherd/internal/settlement/evm/testchain"
)

// devchain is `voucherd devchain`, the local EVM chain `make run` pays on:
// go-ethereum's in-process simulated chain (ethclient/simulated) served as Ethereum
// JSON-RPC over HTTP, so no outside node is needed. It prefunds the five
// well-known development accounts (testchain.DevKeys: anvil's and hardhat's
// defaults, public keys for test money only), deploys the dev tokens and an
// ETH/USD price feed at fixed addresses (deployer account 0, nonces 0, 1,
// 2), and the deposit factory (its own deployer, anvil's account 8, nonce
// 0: testchain.DevFactory), prefunds the dev sweep account (anvil's account
// 9: the VOUCHER_SWEEP_KEY `make run` passes), seals a block after every
// transaction it receives and an empty one every -block-time, so
// confirmations grow.
//
//	voucherd devchain [-addr 127.0.0.1:8545] [-block-time 2s]
//	voucherd devchain send -to 0xPAYEE -currency USDC -amount 12.5 [-from 1] [-rpc URL]
//
// `send` signs and sends a real transfer (a dev token, or ETH) from a dev
// account and prints its transaction hash: the README's first session pays a
// voucher with it. It works against any node that prefunds the dev accounts
// and has the dev tokens (devchain, or anvil after the same deployments).
//
// It is a subcommand of voucherd rather than a binary of its own so that
// `make run` builds and links one program (see the README's "What a first
// run costs"), and it is compiled in only with the devchain build tag
// (`go build -tags devchain`, as make run builds): the service's own build
// never links a node (go-ethereum's eth, core, miner and their storage).
func devchain(args []string) error {
	if len(args) > 0 && args[0] == "send" {
		return devSend(args[1:])
	}
	return devServe(args)
}

// devToken is a token the dev chain deploys.
type devToken struct {
	Symbol   string
	Decimals uint8
	Nonce    uint64 // the deployer's nonce: fixes the address
}

// devTokens are deployed by DevAccount(0) in this order, so each one's address
// is CreateAddress(account 0, Nonce) on a fresh chain.
var devTokens = []devToken{{"USDC", 6, 0}, {"DAI", 18, 1}}

// devFeedNonce is the ETH/USD aggregator's deployment nonce (8 decimals).
const devFeedNonce = 2

// devETHUSD is the dev feed's answer (3000 USD, 8 decimals), refreshed with the
// current time every minute so a maxAge of minutes holds.
var devETHUSD = big.NewInt(3000_00000000)

func devTokenAddress(symbol string) (common.Address, devToken, bool) {
	for _, t := range devTokens {
		if t.Symbol == symbol {
			return testchain.CreateAddress(testchain.DevAccount(0).Address, t.Nonce), t, true
		}
	}
	return common.Address{}, devToken{}, false
}

func devServe(args []string) error {
	fs := flag.NewFlagSet("voucherd devchain", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8545", "JSON-RPC listen address")
	blockTime := fs.Duration("block-time", 2*time.Second, "seal an empty block this often (0: only on transactions)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	var funded []common.Address
	for i := range testchain.DevKeys {
		funded = append(funded, testchain.DevAccount(i).Address)
	}
	factoryDeployer, sweeper := testchain.KeyAccount(testchain.DevFactoryDeployerKey), testchain.KeyAccount(testchain.DevSweepKey)
	sim := testchain.NewSim(append(funded, factoryDeployer.Address, sweeper.Address)...)
	defer sim.Close()
	var mu sync.Mutex // one Commit at a time
	commit := func() { mu.Lock(); sim.Commit(); mu.Unlock() }

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := devDeploy(ctx, sim, commit); err != nil {
		return fmt.Errorf("deploying the dev contracts: %w", err)
	}

	srv := &http.Server{Handler: testchain.Handler(sim.RPC, commit), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go devTick(ctx, sim, commit, *blockTime, log)

	attrs := []any{"rpc", "http://" + ln.Addr().String(), "chainId", testchain.SimChainID}
	for _, t := range devTokens {
		a, _, _ := devTokenAddress(t.Symbol)
		attrs = append(attrs, t.Symbol, a.Hex())
	}
	attrs = append(attrs, "ETH/USD feed", testchain.CreateAddress(funded[0], devFeedNonce).Hex(), "depositFactory", testchain.DevFactory().Hex())
	log.Info("devchain ready", attrs...)
	for i, a := range funded {
		log.Info("dev account (public test key: test money only)", "index", i, "address", a.Hex(), "key", "0x"+testchain.DevKeys[i])
	}
	log.Info("dev sweep account (gas only; public test key)", "address", sweeper.Address.Hex(), "key", "0x"+testchain.DevSweepKey)
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// deploy puts the dev tokens and the feed at their fixed addresses and
// mints every dev account 1,000,000 of each token. The deployer's nonces
// are counted here (the chain is fresh), and each batch is committed until
// every receipt is in: the simulated chain's pool resets after a commit in
// the background, so its pending nonce, and what the next block picks up,
// can lag for a moment on a busy machine.
func devDeploy(ctx context.Context, sim *testchain.Sim, commit func()) error {
	owner := testchain.DevAccount(0)
	var nonce uint64
	send := func(to *common.Address, data []byte) (common.Hash, error) {
		h, err := testchain.SendNonce(ctx, sim.Client, owner, nonce, to, nil, data, 0)
		if err == nil {
			nonce++
		}
		return h, err
	}
	for _, t := range devTokens {
		h, err := send(nil, testchain.DeployTokenData("Dev "+t.Symbol, t.Symbol, t.Decimals))
		if err != nil {
			return err
		}
		if err := devMine(ctx, sim, commit, h); err != nil {
			return err
		}
	}
	h, err := send(nil, testchain.DeployAggregatorData(8, "ETH / USD (dev)"))
	if err != nil {
		return err
	}
	if err := devMine(ctx, sim, commit, h); err != nil {
		return err
	}
	var mints []common.Hash
	for _, t := range devTokens {
		a, _, _ := devTokenAddress(t.Symbol)
		amount := new(big.Int).Mul(big.NewInt(1_000_000), new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(t.Decimals)), nil))
		for i := range testchain.DevKeys {
			h, err := send(&a, testchain.MintData(testchain.DevAccount(i).Address, amount))
			if err != nil {
				return err
			}
			mints = append(mints, h)
		}
	}
	if err := devMine(ctx, sim, commit, mints...); err != nil {
		return err
	}
	feed := testchain.CreateAddress(owner.Address, devFeedNonce)
	if h, err = send(&feed, testchain.SetAnswerData(devETHUSD, time.Now())); err != nil {
		return err
	}
	if err := devMine(ctx, sim, commit, h); err != nil {
		return err
	}
	// The deposit factory: its own deployer's first transaction.
	deployer := testchain.KeyAccount(testchain.DevFactoryDeployerKey)
	if h, err = testchain.SendNonce(ctx, sim.Client, deployer, 0, nil, nil, deposit.FactoryCode, 0); err != nil {
		return err
	}
	if err := devMine(ctx, sim, commit, h); err != nil {
		return err
	}
	if err := deposit.Verify(ctx, sim.RPC, testchain.DevFactory()); err != nil {
		return err
	}
	// Check the fixed addresses hold code: a change in the order above
	// would otherwise move a token silently.
	for _, t := range devTokens {
		a, _, _ := devTokenAddress(t.Symbol)
		code, err := sim.Client.CodeAt(ctx, a, nil)
		if err != nil || len(code) == 0 {
			return fmt.Errorf("%s is not at %s", t.Symbol, a.Hex())
		}
	}
	return nil
}

// mine commits blocks until every one of hs has a successful receipt.
func devMine(ctx context.Context, sim *testchain.Sim, commit func(), hs ...common.Hash) error {
	for range 50 {
		commit()
		done := true
		for _, h := range hs {
			r, err := sim.Client.TransactionReceipt(ctx, h)
			if err != nil {
				done = false
				break
			}
			if r.Status != 1 {
				return fmt.Errorf("deploy transaction %s reverted", h.Hex())
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("deploy transactions not mined after 50 blocks")
}

func devRefreshFeed(ctx context.Context, sim *testchain.Sim, commit func()) error {
	feed := testchain.CreateAddress(testchain.DevAccount(0).Address, devFeedNonce)
	_, err := testchain.Send(ctx, sim.Client, testchain.DevAccount(0), &feed, nil, testchain.SetAnswerData(devETHUSD, time.Now()), 0)
	if err == nil {
		commit()
	}
	return err
}

// tick seals an empty block every d (so a payment's confirmations grow
// without further transactions) and refreshes the price feed every minute.
func devTick(ctx context.Context, sim *testchain.Sim, commit func(), d time.Duration, log *slog.Logger) {
	feed := time.NewTicker(time.Minute)
	defer feed.Stop()
	var blocks <-chan time.Time
	if d > 0 {
		t := time.NewTicker(d)
		defer t.Stop()
		blocks = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-blocks:
			commit()
		case <-feed.C:
			if err := devRefreshFeed(ctx, sim, commit); err != nil {
				log.Warn("refreshing the ETH/USD feed", "err", err.Error())
			}
		}
	}
}

func devSend(args []string) error {
	fs := flag.NewFlagSet("voucherd devchain send", flag.ContinueOnError)
	rpcURL := fs.String("rpc", "http://127.0.0.1:8545", "JSON-RPC endpoint")
	from := fs.Int("from", 1, "dev account index (0-4) paying")
	to := fs.String("to", "", "recipient address (the voucher's expectedPayment.wallet.address)")
	currency := fs.String("currency", "USDC", "ETH or a dev token symbol (USDC, DAI)")
	amount := fs.String("amount", "", "decimal amount, e.g. 12.5")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if !common.IsHexAddress(*to) {
		return errors.New("-to: want a 0x address")
	}
	if *from < 0 || *from >= len(testchain.DevKeys) {
		return fmt.Errorf("-from: want 0 to %d", len(testchain.DevKeys)-1)
	}
	decimals := uint8(18)
	var token common.Address
	if sym := strings.ToUpper(*currency); sym != "ETH" {
		var t devToken
		var ok bool
		if token, t, ok = devTokenAddress(sym); !ok {
			return fmt.Errorf("-currency: unknown dev token %q", *currency)
		}
		decimals = t.Decimals
	}
	d, err := decimal.NewFromString(*amount)
	if err != nil || d.Sign() <= 0 {
		return errors.New("-amount: want a positive decimal")
	}
	units := d.Shift(int32(decimals))
	if !units.IsInteger() {
		return fmt.Errorf("-amount: more than %d decimals", decimals)
	}
	value := units.BigInt()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ethclient.DialContext(ctx, *rpcURL)
	if err != nil {
		return err
	}
	defer c.Close()
	payee := common.HexToAddress(*to)
	var h common.Hash
	if token == (common.Address{}) {
		h, err = testchain.Send(ctx, c, testchain.DevAccount(*from), &payee, value, nil, 0)
	} else {
		h, err = testchain.Send(ctx, c, testchain.DevAccount(*from), &token, nil, testchain.TransferData(payee, value), 0)
	}
	if err != nil {
		return err
	}
	r, err := testchain.Wait(ctx, c, h)
	if err != nil {
		return err
	}
	if r.Status != 1 {
		return fmt.Errorf("transaction %s reverted", h.Hex())
	}
	fmt.Println(h.Hex())
	return nil
}
