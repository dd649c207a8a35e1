package finance

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/shopspring/decimal"

	"github.com/voucherd/voucherd/internal/money"
)

// MaxConfigBytes caps a finance config file; a real one is a few KiB.
const MaxConfigBytes = 1 << 20

// Config is a loaded finance config: the registry and its file-backed prices.
type Config struct {
	Registry *Registry
	Prices   *StaticPrices
}

// fileFormat is the config file's JSON. Example (see default.json):
//
//	{
//	  "updatedAt": "2026-01-01T00:00:00.000Z",
//	  "networks": [{"network": "ethereum", "type": "evm", "chainId": "1"}],
//	  "tokens": [{"network": "ethereum", "currency": "USDC",
//	              "currencyAddress": "0xA0b8...eB48", "decimals": 6, "native": false}],
//	  "prices": {"USDC": "1"}
//	}
//
// Prices are decimal strings (never JSON numbers, which would go through
// float64), one per currency symbol across all networks.
type fileFormat struct {
	UpdatedAt *string   `json:"updatedAt"`
	Networks  []Network `json:"networks"`
	Tokens    []Token   `json:"tokens"`
	Prices    priceList `json:"prices"`
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
	reg, err := NewRegistry(f.Networks, f.Tokens)
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
			if _, ok := prices[t.Currency]; !ok {
				p.add("prices", fmt.Sprintf("missing a price for %s", t.Currency))
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
	return &Config{Registry: reg, Prices: sp}, nil
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
