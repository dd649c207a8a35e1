// Package finance answers "which tokens can a voucher be paid in, and what
// are they worth": the token registry (networks and their tokens with
// contract addresses and decimals), USD prices behind a PriceSource so a live
// feed can replace the shipped file, the two public finance reads
// (currencies and rates), and the FX quote a negotiation uses.
//
// Both the registry and the static prices come from one JSON config file
// (see Load for its format); a development default with real mainnet
// addresses is embedded (Default). Everything built from a config is
// immutable, so it is shared freely between goroutines.
//
// Matching rules, fixed here so every caller agrees:
//   - network names and currency symbols are case-sensitive ("ethereum",
//     "USDC"), exactly as the config and the currencies route spell them;
//   - an EVM currencyAddress is first validated (EIP-55 when mixed case) and
//     then compared case-insensitively; a Solana one is compared exactly
//     (base58 is case-sensitive).
package finance

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/money"
)

// NativeEVMAddress is the ERC-7528 placeholder for a chain's native currency
// (ETH, POL, ...), which has no contract.
const NativeEVMAddress = "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"

// NativeSolanaAddress stands for SOL. SOL has no mint; the system program id
// (32 zero bytes) is the conventional stand-in, as wallets and Solana Pay do.
const NativeSolanaAddress = "11111111111111111111111111111111"

// MaxDecimals bounds a token's decimals. Real tokens stay well below it
// (18 is the common maximum); the bound keeps quote arithmetic small.
const MaxDecimals = 36

// Network is one supported chain. The JSON names are the API's
// (networks[].network, .type, .chainId).
type Network struct {
	Name string `json:"network"`
	// Type is chain.TypeEVM or chain.TypeSolana.
	Type string `json:"type"`
	// ChainID is a string because the API's is: an EVM chain id in decimal,
	// or a Solana cluster name ("mainnet-beta").
	ChainID string `json:"chainId"`

	// The chain side (docs/settlement.md, "Settings"); never shown to clients: an RPC URL often holds an API key.

	// RPCURL is the network's JSON-RPC endpoint (Ethereum JSON-RPC for evm,
	// Solana JSON-RPC for solana). A network with one is verified: receipts
	// are checked on chain. Empty: not verified.
	RPCURL string `json:"-"`
	// Confirmations is how many blocks make a payment confirmed (evm:
	// head − block + 1 ≥ Confirmations; solana: the finalized commitment).
	// At least 1; NewRegistry makes 0 DefaultConfirmations.
	Confirmations uint64 `json:"-"`
	// PollInterval is how often the network is polled; NewRegistry makes 0
	// DefaultPollInterval.
	PollInterval time.Duration `json:"-"`
	// DepositFactory is the deposit factory's address (EIP-55) on an evm
	// network that names one: each checkout on it is paid to its own
	// deposit address (internal/settlement/evm/deposit). Empty: checkouts
	// are paid to the widget's wallet.
	DepositFactory string `json:"-"`
}

// Defaults for a network's chain-side settings.
const (
	DefaultConfirmations = 1
	DefaultPollInterval  = 2 * time.Second
)

// Verified reports whether receipts on n are checked on chain.
func (n Network) Verified() bool { return n.RPCURL != "" }

// Token is one currency on one network. Its JSON names are the finance file's (config.go); REST shows a token
// as view.Currency.
type Token struct {
	Network         string `json:"network"`
	Currency        string `json:"currency"`
	CurrencyAddress string `json:"currencyAddress"`
	Decimals        int32  `json:"decimals"`
	Native          bool   `json:"native"`
}

// Registry is the validated, immutable set of networks and tokens.
type Registry struct {
	networks   []Network
	byName     map[string]int
	tokens     []Token
	byCurrency map[tokenKey]int
	byAddress  map[tokenKey]int // key.s is the address, lower-cased for EVM
	currencies []string
}

type tokenKey struct{ network, s string }

var (
	networkNameRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)
	currencyRe     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.-]{0,15}$`)
	solanaChainRe  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,63}$`)
	errNoSuchToken = errors.New("unknown token")
)

// NewRegistry validates networks and tokens and indexes them. Every problem
// found is reported, not just the first, so a bad config is fixed in one go.
func NewRegistry(networks []Network, tokens []Token) (*Registry, error) {
	var p problems
	r := &Registry{
		byName:     map[string]int{},
		byCurrency: map[tokenKey]int{},
		byAddress:  map[tokenKey]int{},
	}
	if len(networks) == 0 {
		p.add("networks", "must list at least one network")
	}
	chainIDs := map[[2]string]string{}
	for i, n := range networks {
		at := fmt.Sprintf("networks[%d]", i)
		switch {
		case !networkNameRe.MatchString(n.Name):
			p.add(at+".network", "must be 1 to 32 of a-z, 0-9 and '-', starting with a letter or digit")
		default:
			if _, dup := r.byName[n.Name]; dup {
				p.add(at+".network", fmt.Sprintf("duplicate network %q", n.Name))
			}
		}
		if !chain.KnownType(n.Type) {
			p.add(at+".type", chain.ErrUnknownType.Error())
		}
		switch n.Type {
		case chain.TypeEVM:
			if u, err := strconv.ParseUint(n.ChainID, 10, 64); err != nil || u == 0 || strconv.FormatUint(u, 10) != n.ChainID {
				p.add(at+".chainId", "must be a positive decimal integer without leading zeros")
			}
		case chain.TypeSolana:
			if !solanaChainRe.MatchString(n.ChainID) {
				p.add(at+".chainId", `must name a cluster, e.g. "mainnet-beta"`)
			}
		}
		if n.ChainID != "" && chain.KnownType(n.Type) {
			k := [2]string{n.Type, n.ChainID}
			if other, dup := chainIDs[k]; dup {
				p.add(at+".chainId", fmt.Sprintf("chain id %s already used by network %q", n.ChainID, other))
			}
			chainIDs[k] = n.Name
		}
		if n.Confirmations == 0 {
			n.Confirmations = DefaultConfirmations
		}
		if n.PollInterval == 0 {
			n.PollInterval = DefaultPollInterval
		}
		if _, dup := r.byName[n.Name]; !dup {
			r.byName[n.Name] = len(r.networks)
			r.networks = append(r.networks, n)
		}
	}

	natives := map[string]bool{}
	seenCurrency := map[string]bool{}
	for i, t := range tokens {
		at := fmt.Sprintf("tokens[%d]", i)
		ni, ok := r.byName[t.Network]
		if !ok {
			p.add(at+".network", fmt.Sprintf("unknown network %q", t.Network))
			continue
		}
		n := r.networks[ni]
		bad := false
		if !currencyRe.MatchString(t.Currency) {
			p.add(at+".currency", "must be 1 to 16 of A-Z, a-z, 0-9, '.' and '-'")
			bad = true
		} else if _, dup := r.byCurrency[tokenKey{t.Network, t.Currency}]; dup {
			p.add(at+".currency", fmt.Sprintf("duplicate currency %q on network %q", t.Currency, t.Network))
			bad = true
		}
		if t.Decimals < 0 || t.Decimals > MaxDecimals {
			p.add(at+".decimals", fmt.Sprintf("must be 0 to %d", MaxDecimals))
			bad = true
		}
		if !chain.KnownType(n.Type) {
			// Already reported on the network; its addresses cannot be judged.
			bad = true
		} else if err := chain.ValidateAddress(n.Type, t.CurrencyAddress); err != nil {
			p.add(at+".currencyAddress", err.Error())
			bad = true
		} else {
			nativeAddr := nativeAddress(n.Type)
			isNativeAddr := chain.SameAddress(n.Type, t.CurrencyAddress, nativeAddr)
			switch {
			case t.Native && !isNativeAddr:
				p.add(at+".currencyAddress", "a native currency must use "+nativeAddr)
				bad = true
			case !t.Native && isNativeAddr:
				p.add(at+".currencyAddress", nativeAddr+" is reserved for the native currency")
				bad = true
			}
			if other, dup := r.byAddress[addressKey(n, t.CurrencyAddress)]; dup {
				p.add(at+".currencyAddress", fmt.Sprintf("address already used by %s on %q", r.tokens[other].Currency, t.Network))
				bad = true
			}
		}
		if t.Native {
			if natives[t.Network] {
				p.add(at+".native", fmt.Sprintf("network %q already has a native currency", t.Network))
				bad = true
			}
			natives[t.Network] = true
		}
		if bad {
			continue
		}
		if n.Type == chain.TypeEVM {
			// Store the checksum form so every address the API shows is
			// copy-paste safe, whatever case the config used.
			t.CurrencyAddress = chain.ChecksumAddress(t.CurrencyAddress)
		}
		idx := len(r.tokens)
		r.tokens = append(r.tokens, t)
		r.byCurrency[tokenKey{t.Network, t.Currency}] = idx
		r.byAddress[addressKey(n, t.CurrencyAddress)] = idx
		if !seenCurrency[t.Currency] {
			seenCurrency[t.Currency] = true
			r.currencies = append(r.currencies, t.Currency)
		}
	}
	if err := p.err("token registry"); err != nil {
		return nil, err
	}
	return r, nil
}

func nativeAddress(networkType string) string {
	if networkType == chain.TypeSolana {
		return NativeSolanaAddress
	}
	return NativeEVMAddress
}

func addressKey(n Network, addr string) tokenKey {
	if n.Type == chain.TypeEVM {
		addr = strings.ToLower(addr)
	}
	return tokenKey{n.Name, addr}
}

// Network returns the named network.
func (r *Registry) Network(name string) (Network, bool) {
	i, ok := r.byName[name]
	if !ok {
		return Network{}, false
	}
	return r.networks[i], true
}

// Networks returns every network in config order.
func (r *Registry) Networks() []Network {
	return append([]Network(nil), r.networks...)
}

// Token returns the token with symbol currency on network.
func (r *Registry) Token(network, currency string) (Token, bool) {
	i, ok := r.byCurrency[tokenKey{network, currency}]
	if !ok {
		return Token{}, false
	}
	return r.tokens[i], true
}

// Tokens returns the tokens of network in config order, or every token when
// network is "". An unknown network yields an empty, non-nil slice (so JSON
// renders []); callers that must reject it check Network first.
func (r *Registry) Tokens(network string) []Token {
	out := []Token{}
	for _, t := range r.tokens {
		if network == "" || t.Network == network {
			out = append(out, t)
		}
	}
	return out
}

// Currencies returns every currency symbol in the registry, once each, in
// config order. These are the symbols that must have a price.
func (r *Registry) Currencies() []string {
	return append([]string(nil), r.currencies...)
}

// TokenByAddress finds the token at currencyAddress on network. An address
// that is not valid for the network's type (including a wrong EIP-55
// checksum) matches nothing.
func (r *Registry) TokenByAddress(network, currencyAddress string) (Token, bool) {
	n, ok := r.Network(network)
	if !ok || chain.ValidateAddress(n.Type, currencyAddress) != nil {
		return Token{}, false
	}
	i, ok := r.byAddress[addressKey(n, currencyAddress)]
	if !ok {
		return Token{}, false
	}
	return r.tokens[i], true
}

// MatchAddress checks that addr, as a client wrote it, names t's contract.
// The error text is a validation reason.
func (r *Registry) MatchAddress(t Token, addr string) error {
	n, ok := r.Network(t.Network)
	if !ok {
		return errNoSuchToken
	}
	if err := chain.ValidateAddress(n.Type, addr); err != nil {
		return err
	}
	if !chain.SameAddress(n.Type, addr, t.CurrencyAddress) {
		return fmt.Errorf("does not match the %s address on %s (%s)", t.Currency, t.Network, t.CurrencyAddress)
	}
	return nil
}

// Payment is a token payment as a client sends it (expectedPayment,
// suppliedPayment). Quote reads only Network, Currency and Amount.
type Payment struct {
	Network         string
	Currency        string
	CurrencyAddress string
	Amount          string
	WalletAddress   string
}

// CheckPayment validates p against the registry, recording every problem on
// v under prefix (e.g. "expectedPayment" gives "expectedPayment.amount",
// "expectedPayment.wallet.address"). Checks that depend on an earlier field
// (the currency on an unknown network, the precision of an amount of an
// unknown token) are skipped rather than reported twice; the amount's syntax
// and sign are still checked. It returns the token and amount when p is valid.
func (r *Registry) CheckPayment(v *apperr.Validator, prefix string, p Payment) (Token, decimal.Decimal, bool) {
	ok := true
	fail := func(field, reason string) {
		v.Add(prefix+"."+field, reason)
		ok = false
	}
	n, known := r.Network(p.Network)
	switch {
	case p.Network == "":
		fail("network", "is required")
	case !known:
		fail("network", "unknown network")
	}
	var tok Token
	haveTok := false
	switch {
	case p.Currency == "":
		fail("currency", "is required")
	case known:
		tok, haveTok = r.Token(p.Network, p.Currency)
		if !haveTok {
			fail("currency", fmt.Sprintf("unknown currency on network %s", p.Network))
		}
	}
	switch {
	case p.CurrencyAddress == "":
		fail("currencyAddress", "is required")
	case haveTok:
		if err := r.MatchAddress(tok, p.CurrencyAddress); err != nil {
			fail("currencyAddress", err.Error())
		}
	case known:
		if err := chain.ValidateAddress(n.Type, p.CurrencyAddress); err != nil {
			fail("currencyAddress", err.Error())
		}
	}
	var amount decimal.Decimal
	var err error
	if haveTok {
		amount, err = money.Parse(p.Amount, tok.Decimals)
	} else {
		amount, err = money.ParseAnyScale(p.Amount)
	}
	if err != nil {
		fail("amount", err.Error())
	}
	switch {
	case p.WalletAddress == "":
		fail("wallet.address", "is required")
	case known:
		if err := chain.ValidateAddress(n.Type, p.WalletAddress); err != nil {
			fail("wallet.address", err.Error())
		}
	}
	if !ok || !haveTok {
		return Token{}, decimal.Decimal{}, false
	}
	return tok, amount, true
}

// problems collects config errors with their JSON paths.
type problems struct{ list []string }

func (p *problems) add(path, reason string) { p.list = append(p.list, path+": "+reason) }

func (p *problems) err(what string) error {
	if len(p.list) == 0 {
		return nil
	}
	return &ConfigError{What: what, Problems: p.list}
}

// ConfigError lists every problem found in a finance config.
type ConfigError struct {
	What     string
	Problems []string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("invalid %s (%d problem(s)): %s", e.What, len(e.Problems), strings.Join(e.Problems, "; "))
}
