package finance

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/chain"
	"github.com/voucherd/voucherd/internal/money"
)

// MaxConfigBytes caps a finance config file; a real one is a few KiB.
const MaxConfigBytes = 1 << 20

// Config is a loaded finance config: the registry, its file-backed prices
// and the price feeds that replace file prices for their currencies.
type Config struct {
	Registry *Registry
	Prices   *StaticPrices
	Feeds    []PriceFeed
}

// PriceFeed is a Chainlink-compatible aggregator (latestRoundData,
// decimals) giving the USD price of Currency, read over Network's RPC. An
// answer that is not positive, or older than MaxAge, is no price.
type PriceFeed struct {
	Currency string
	Network  string
	Address  string // EIP-55 form
	MaxAge   time.Duration
}

// fileFormat is the config file's JSON. Example (see default.json):
//
//	{
//	  "updatedAt": "2026-01-01T00:00:00.000Z",
//	  "networks": [{"network": "ethereum", "type": "evm", "chainId": "1",
//	                "rpcUrl": "https://...", "confirmations": 12, "pollInterval": "4s",
//	                "depositFactory": "0x..."}],
//	  "tokens": [{"network": "ethereum", "currency": "USDC",
//	              "currencyAddress": "0xA0b8...eB48", "decimals": 6, "native": false}],
//	  "prices": {"USDC": "1"},
//	  "priceFeeds": [{"currency": "ETH", "network": "ethereum",
//	                  "address": "0x5f4e...8419", "maxAge": "1h"}]
//	}
//
// Prices are decimal strings (never JSON numbers, which would go through
// float64), one per currency symbol across all networks. A currency with a
// price feed has no file price (the feed is its only price).
type fileFormat struct {
	UpdatedAt  *string       `json:"updatedAt"`
	Networks   []networkJSON `json:"networks"`
	Tokens     []Token       `json:"tokens"`
	Prices     priceList     `json:"prices"`
	PriceFeeds []feedJSON    `json:"priceFeeds"`
}

type networkJSON struct {
	Name          string  `json:"network"`
	Type          string  `json:"type"`
	ChainID       string  `json:"chainId"`
	RPCURL        string  `json:"rpcUrl"`
	Confirmations *int64  `json:"confirmations"`
	PollInterval  *string `json:"pollInterval"`
	// DepositFactory is the address of the project's deposit factory on
	// the chain (evm only; the network needs an rpcUrl): each checkout on
	// the network then gets its own deposit address.
	DepositFactory string `json:"depositFactory"`
}

type feedJSON struct {
	Currency string `json:"currency"`
	Network  string `json:"network"`
	Address  string `json:"address"`
	MaxAge   string `json:"maxAge"`
}

// MinPollInterval bounds pollInterval from below (a node is not a busy loop).
const MinPollInterval = 100 * time.Millisecond

// networks converts the file's networks, reporting bad chain-side settings.
func (f *fileFormat) networks(p *problems) []Network {
	out := make([]Network, len(f.Networks))
	for i, n := range f.Networks {
		at := fmt.Sprintf("networks[%d]", i)
		out[i] = Network{Name: n.Name, Type: n.Type, ChainID: n.ChainID, RPCURL: n.RPCURL}
		if n.RPCURL != "" {
			if err := checkRPCURL(n.Type, n.RPCURL); err != nil {
				p.add(at+".rpcUrl", err.Error())
			}
		}
		if n.Confirmations != nil {
			if *n.Confirmations < 1 {
				p.add(at+".confirmations", "must be an integer of at least 1")
			} else {
				out[i].Confirmations = uint64(*n.Confirmations)
			}
		}
		if n.DepositFactory != "" {
			switch {
			case n.Type != chain.TypeEVM:
				p.add(at+".depositFactory", "deposit addresses exist on evm networks only")
			case chain.ValidateEVMAddress(n.DepositFactory) != nil:
				p.add(at+".depositFactory", "must be an EVM address (0x and 40 hex digits, EIP-55 checksum when mixed-case)")
			case strings.TrimLeft(strings.ToLower(n.DepositFactory[2:]), "0") == "":
				p.add(at+".depositFactory", "must not be the zero address")
			case n.RPCURL == "":
				p.add(at+".depositFactory", "needs the network's rpcUrl: payments to deposit addresses are found on chain")
			default:
				out[i].DepositFactory = chain.ChecksumAddress(n.DepositFactory)
			}
		}
		if n.PollInterval != nil {
			d, err := time.ParseDuration(*n.PollInterval)
			if err != nil || d < MinPollInterval {
				p.add(at+".pollInterval", fmt.Sprintf("must be a Go duration of at least %s, such as \"2s\"", MinPollInterval))
			} else {
				out[i].PollInterval = d
			}
		}
	}
	return out
}

// checkRPCURL accepts http(s) and, on evm, ws(s) endpoints. The URL itself
// never appears in the message (it may hold an API key).
func checkRPCURL(networkType, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return errors.New("must be an absolute http(s) URL")
	}
	switch u.Scheme {
	case "http", "https":
		return nil
	case "ws", "wss":
		if networkType == chain.TypeEVM {
			return nil
		}
	}
	if networkType == chain.TypeEVM {
		return errors.New("must be an http, https, ws or wss URL")
	}
	return errors.New("must be an http or https URL")
}

// feeds validates the price feeds against the registry's networks and
// currencies as written.
func (f *fileFormat) feeds(p *problems, networks []Network) []PriceFeed {
	byName := map[string]Network{}
	for _, n := range networks {
		byName[n.Name] = n
	}
	currencies := map[string]bool{}
	for _, t := range f.Tokens {
		currencies[t.Currency] = true
	}
	var out []PriceFeed
	seen := map[string]bool{}
	for i, e := range f.PriceFeeds {
		at := fmt.Sprintf("priceFeeds[%d]", i)
		ok := true
		switch {
		case !currencies[e.Currency]:
			p.add(at+".currency", "no token uses this currency")
			ok = false
		case seen[e.Currency]:
			p.add(at+".currency", "duplicate feed for "+e.Currency)
			ok = false
		}
		seen[e.Currency] = true
		n, known := byName[e.Network]
		switch {
		case !known:
			p.add(at+".network", fmt.Sprintf("unknown network %q", e.Network))
			ok = false
		case n.Type != chain.TypeEVM:
			p.add(at+".network", "price feeds are read on evm networks")
			ok = false
		case n.RPCURL == "":
			p.add(at+".network", "the network has no rpcUrl to read the feed with")
			ok = false
		}
		if err := chain.ValidateAddress(chain.TypeEVM, e.Address); err != nil {
			p.add(at+".address", err.Error())
			ok = false
		}
		d, err := time.ParseDuration(e.MaxAge)
		if err != nil || d <= 0 {
			p.add(at+".maxAge", `must be a positive Go duration such as "1h"`)
			ok = false
		}
		if ok {
			out = append(out, PriceFeed{Currency: e.Currency, Network: e.Network, Address: chain.ChecksumAddress(e.Address), MaxAge: d})
		}
	}
	return out
}

type priceEntry struct{ currency, price string }

// priceList decodes a JSON object keeping its order and its duplicate keys:
// encoding/json silently keeps the last of two equal keys, which would let a
// typo'd config quietly change a price.
type priceList []priceEntry

func (p *priceList) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New(`"prices" must be an object of currency to decimal string`)
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key := tok.(string) // object keys are always strings
		var v string
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf(`prices.%s must be a decimal string (quoted, not a JSON number)`, key)
		}
		*p = append(*p, priceEntry{key, v})
	}
	_, err = dec.Token() // the closing brace
	return err
}

// Load parses and validates a finance config. Decoding is strict (unknown
// fields, trailing data and numeric prices are errors) and every problem is
// reported at once: the network types are known, addresses valid for their
// network (EIP-55 when mixed case), decimals in range, no duplicate network,
// chain id, currency or address, one native currency at most per network on
// its reserved address, every token's currency priced, no price for a
// currency no token uses, every price a positive decimal string, and
// updatedAt an RFC 3339 time.
func Load(data []byte) (*Config, error) {
	if len(data) > MaxConfigBytes {
		return nil, fmt.Errorf("finance config is larger than %d bytes", MaxConfigBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fileFormat
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("finance config: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("finance config: unexpected data after the JSON object")
	}

	var p problems
	networks := f.networks(&p)
	feeds := f.feeds(&p, networks)
	fed := map[string]bool{}
	for _, e := range f.PriceFeeds {
		fed[e.Currency] = true
	}
	reg, err := NewRegistry(networks, f.Tokens)
	var cerr *ConfigError
	if errors.As(err, &cerr) {
		p.list = append(p.list, cerr.Problems...)
	} else if err != nil {
		return nil, err
	}

	var updatedAt time.Time
	if f.UpdatedAt == nil {
		p.add("updatedAt", "is required")
	} else if updatedAt, err = time.Parse(time.RFC3339Nano, *f.UpdatedAt); err != nil {
		p.add("updatedAt", "must be an RFC 3339 time such as 2026-01-01T00:00:00.000Z")
	}

	prices := map[string]decimal.Decimal{}
	for _, e := range f.Prices {
		at := "prices." + e.currency
		if _, dup := prices[e.currency]; dup {
			p.add(at, "duplicate currency")
			continue
		}
		d, err := money.ParseAnyScale(e.price)
		if err != nil {
			p.add(at, err.Error())
			d = decimal.Zero
		}
		prices[e.currency] = d
	}
	// The registry is nil when it had problems; check prices against the
	// tokens as written so those problems are still reported.
	used := map[string]bool{}
	for _, t := range f.Tokens {
		if !used[t.Currency] && t.Currency != "" {
			used[t.Currency] = true
			_, priced := prices[t.Currency]
			switch {
			case fed[t.Currency] && priced:
				p.add("prices."+t.Currency, "has a price feed; a file price would be ambiguous")
			case !fed[t.Currency] && !priced:
				p.add("prices", fmt.Sprintf("missing a price for %s (or a price feed)", t.Currency))
			}
		}
	}
	for _, e := range f.Prices {
		if !used[e.currency] {
			p.add("prices."+e.currency, "no token uses this currency")
		}
	}

	if err := p.err("finance config"); err != nil {
		return nil, err
	}
	sp, err := NewStaticPrices(prices, updatedAt.UTC())
	if err != nil { // unreachable: ParseAnyScale only accepts positive values
		return nil, err
	}
	return &Config{Registry: reg, Prices: sp, Feeds: feeds}, nil
}

// LoadFile reads and validates the finance config at path (the service takes
// it from VOUCHER_FINANCE_FILE).
func LoadFile(path string) (*Config, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("finance config: %w", err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, MaxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("finance config %s: %w", path, err)
	}
	cfg, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

//go:embed default.json
var defaultJSON []byte

var defaultConfig = sync.OnceValue(func() *Config {
	cfg, err := Load(defaultJSON)
	if err != nil {
		// The file is compiled in and a test loads it, so this only fires
		// if someone ships a broken default; failing loudly beats serving
		// a registry with holes.
		panic("finance: embedded default.json is invalid: " + err.Error())
	}
	return cfg
})

// Default returns the embedded development config (real mainnet token
// addresses, illustrative prices). The result is shared and immutable.
func Default() *Config { return defaultConfig() }
