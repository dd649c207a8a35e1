package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/ethereum/go-ethereum/rpc"

	"github.com/voucherd/voucherd/internal/settlement/evm/deposit"
)

// deployFactory is `voucherd deploy-factory -rpc-url URL`: it creates the
// deposit factory (internal/settlement/evm/deposit) on the chain at URL
// from the account whose key is in VOUCHER_DEPLOYER_KEY (hex), waits for it
// to be mined, checks it, and prints its address as the last line (the
// value of a finance file network's depositFactory). The key is never
// printed nor logged; the URL is not printed either (providers put API keys
// in it).
func deployFactory(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("voucherd deploy-factory", flag.ContinueOnError)
	fs.SetOutput(stdout)
	rpcURL := fs.String("rpc-url", "", "the chain's JSON-RPC endpoint (http, https, ws or wss)")
	timeout := fs.Duration("timeout", 5*time.Minute, "how long to wait for the creation to be mined")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rpcURL == "" || fs.NArg() != 0 {
		return errors.New("usage: VOUCHER_DEPLOYER_KEY=<hex> voucherd deploy-factory -rpc-url URL")
	}
	hexKey := os.Getenv("VOUCHER_DEPLOYER_KEY")
	if hexKey == "" {
		return errors.New("VOUCHER_DEPLOYER_KEY is not set (the hex private key of an account holding gas)")
	}
	key, err := deposit.ParseKey(hexKey)
	if err != nil {
		return fmt.Errorf("VOUCHER_DEPLOYER_KEY: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	c, err := rpc.DialOptions(ctx, *rpcURL, rpc.WithHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	if err != nil {
		return errors.New("-rpc-url: cannot dial the endpoint")
	}
	defer c.Close()
	d, err := deposit.Deploy(ctx, c, key, time.Second, func(d deposit.Deployment) {
		fmt.Fprintf(stdout, "deployer %s\ntransaction %s\n", d.Deployer.Hex(), d.Tx.Hex())
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, d.Factory.Hex())
	return nil
}
