package finance

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/chain"
)

// TestDefaultRegistry pins every entry of the shipped default against the
// published mainnet addresses, so a typo in default.json cannot slip in.
func TestDefaultRegistry(t *testing.T) {
	reg := Default().Registry
	want := []Token{
		{"ethereum", "ETH", NativeEVMAddress, 18, true},
		{"ethereum", "USDC", "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", 6, false},
		{"ethereum", "USDT", "0xdAC17F958D2ee523a2206206994597C13D831ec7", 6, false},
		{"ethereum", "DAI", "0x6B175474E89094C44Da98b954EedeAC495271d0F", 18, false},
		{"polygon", "POL", NativeEVMAddress, 18, true},
		{"polygon", "USDC", "0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359", 6, false},
		{"polygon", "USDT", "0xc2132D05D31c914a87C6611C10748AEb04B58e8F", 6, false},
		{"polygon", "DAI", "0x8f3Cf7ad23Cd3CaDbD9735AFf958023239c6A063", 18, false},
		{"base", "ETH", NativeEVMAddress, 18, true},
		{"base", "USDC", "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913", 6, false},
		{"base", "DAI", "0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb", 18, false},
		{"arbitrum", "ETH", NativeEVMAddress, 18, true},
		{"arbitrum", "USDC", "0xaf88d065e77c8cC2239327C5EDb3A432268e5831", 6, false},
		{"arbitrum", "USDT", "0xFd086bC7CD5C481DCC9C85ebE478A1C0b69FCbb9", 6, false},
		{"arbitrum", "DAI", "0xDA10009cBd5D07dd0CeCc66161FC93D7c9000da1", 18, false},
		{"solana", "SOL", NativeSolanaAddress, 9, true},
		{"solana", "USDC", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", 6, false},
		{"solana", "USDT", "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY5NpbYdVGdfDKv1", 6, false},
	}
	got := reg.Tokens("")
	if len(got) != len(want) {
		t.Fatalf("default has %d tokens, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("token %d = %+v, want %+v", i, got[i], want[i])
		}
		if n, _ := reg.Network(got[i].Network); n.Type == chain.TypeEVM && chain.ChecksumAddress(got[i].CurrencyAddress) != got[i].CurrencyAddress {
			t.Errorf("%s/%s address not in EIP-55 form", got[i].Network, got[i].Currency)
		}
	}
	wantNets := []Network{
		{Name: "ethereum", Type: "evm", ChainID: "1"}, {Name: "polygon", Type: "evm", ChainID: "137"}, {Name: "base", Type: "evm", ChainID: "8453"},
		{Name: "arbitrum", Type: "evm", ChainID: "42161"}, {Name: "solana", Type: "solana", ChainID: "mainnet-beta"},
	}
	for i := range wantNets {
		wantNets[i].Confirmations, wantNets[i].PollInterval = DefaultConfirmations, DefaultPollInterval
	}
	nets := reg.Networks()
	if len(nets) != len(wantNets) {
		t.Fatalf("networks = %+v", nets)
	}
	for i := range wantNets {
		if nets[i] != wantNets[i] {
			t.Errorf("network %d = %+v, want %+v", i, nets[i], wantNets[i])
		}
	}
	if c := strings.Join(reg.Currencies(), ","); c != "ETH,USDC,USDT,DAI,POL,SOL" {
		t.Errorf("Currencies() = %s", c)
	}
	if first, second := Default(), Default(); first != second {
		t.Error("Default() is rebuilt on every call")
	}
}

func TestRegistryLookups(t *testing.T) {
	reg := Default().Registry
	if _, ok := reg.Network("Ethereum"); ok {
		t.Error("network names must be case-sensitive")
	}
	if tok, ok := reg.Token("polygon", "USDT"); !ok || tok.Decimals != 6 {
		t.Errorf("Token(polygon, USDT) = %+v, %v", tok, ok)
	}
	for _, c := range [][2]string{{"base", "USDT"}, {"solana", "DAI"}, {"ethereum", "usdc"}, {"optimism", "USDC"}, {"ethereum", "POL"}} {
		if _, ok := reg.Token(c[0], c[1]); ok {
			t.Errorf("Token(%s, %s) found", c[0], c[1])
		}
	}
	if got := reg.Tokens("optimism"); got == nil || len(got) != 0 {
		t.Errorf("Tokens(unknown) = %#v, want empty non-nil", got)
	}
	if got := reg.Tokens("base"); len(got) != 3 {
		t.Errorf("Tokens(base) = %+v", got)
	}

	tests := []struct {
		network, addr, want string
	}{
		{"ethereum", "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "USDC"},
		{"ethereum", "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", "USDC"},
		{"ethereum", "0xA0B86991C6218B36C1D19D4A2E9EB0CE3606EB48", "USDC"},
		{"ethereum", "0xa0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", ""}, // bad checksum
		{"polygon", "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", ""},  // USDC of another chain
		{"polygon", "0xeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", "POL"},
		{"solana", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "USDC"},
		{"solana", "11111111111111111111111111111111", "SOL"},
		{"solana", "epjfwdd5aufqssqem2qn1xzybapc8g4weggkzwytdt1v", ""},
		{"optimism", "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", ""},
	}
	for _, tt := range tests {
		tok, ok := reg.TokenByAddress(tt.network, tt.addr)
		if tt.want == "" {
			if ok {
				t.Errorf("TokenByAddress(%s, %s) = %+v, want none", tt.network, tt.addr, tok)
			}
			continue
		}
		if !ok || tok.Currency != tt.want {
			t.Errorf("TokenByAddress(%s, %s) = %+v, %v; want %s", tt.network, tt.addr, tok, ok, tt.want)
		}
	}
}

func TestMatchAddress(t *testing.T) {
	reg := Default().Registry
	usdc, _ := reg.Token("ethereum", "USDC")
	usdcSol, _ := reg.Token("solana", "USDC")
	tests := []struct {
		tok    Token
		addr   string
		reason string // "" = match
	}{
		{usdc, "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", ""},
		{usdc, "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", ""},
		{usdc, "0xa0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", chain.ErrEVMChecksum.Error()},
		{usdc, "0xdAC17F958D2ee523a2206206994597C13D831ec7", "does not match the USDC address on ethereum (0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48)"},
		{usdc, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", chain.ErrEVMFormat.Error()},
		{usdcSol, "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", ""},
		{usdcSol, "Es9vMFrzaCERmJfrF4H2FYD4KCoNkY5NpbYdVGdfDKv1", "does not match the USDC address on solana (EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v)"},
	}
	for _, tt := range tests {
		err := reg.MatchAddress(tt.tok, tt.addr)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.reason {
			t.Errorf("MatchAddress(%s, %s) = %q, want %q", tt.tok.Currency, tt.addr, got, tt.reason)
		}
	}
}

func TestCheckPayment(t *testing.T) {
	reg := Default().Registry
	payee := "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
	good := Payment{"ethereum", "USDC", "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", "12.5", payee}
	tests := []struct {
		name string
		p    Payment
		want map[string]string // field -> reason
	}{
		{"valid", good, nil},
		{"valid solana", Payment{"solana", "SOL", NativeSolanaAddress, "0.000000001", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v"}, nil},
		{"all missing", Payment{}, map[string]string{
			"p.network": "is required", "p.currency": "is required", "p.currencyAddress": "is required",
			"p.amount": "is required", "p.wallet.address": "is required"}},
		{"unknown network still checks amount syntax", Payment{"optimism", "USDC", good.CurrencyAddress, "1e5", payee},
			map[string]string{"p.network": "unknown network", "p.amount": "must be a decimal string such as \"12.5\" (digits, optional fraction; no sign, exponent, spaces or leading zeros)"}},
		{"unknown currency", Payment{"base", "USDT", "0xdAC17F958D2ee523a2206206994597C13D831ec7", "1", payee},
			map[string]string{"p.currency": "unknown currency on network base"}},
		{"unknown currency bad address", Payment{"base", "USDT", "0xdac17F958D2ee523a2206206994597C13D831ec7", "1", payee},
			map[string]string{"p.currency": "unknown currency on network base", "p.currencyAddress": chain.ErrEVMChecksum.Error()}},
		{"address of other token", Payment{"ethereum", "USDC", "0xdAC17F958D2ee523a2206206994597C13D831ec7", "1", payee},
			map[string]string{"p.currencyAddress": "does not match the USDC address on ethereum (0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48)"}},
		{"too precise", Payment{"ethereum", "USDC", good.CurrencyAddress, "1.0000001", payee},
			map[string]string{"p.amount": "must have at most 6 fraction digits for this token"}},
		{"zero", Payment{"ethereum", "USDC", good.CurrencyAddress, "0", payee},
			map[string]string{"p.amount": "must be greater than zero"}},
		{"wallet checksum", Payment{"ethereum", "USDC", good.CurrencyAddress, "1", "0x5AAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"},
			map[string]string{"p.wallet.address": chain.ErrEVMChecksum.Error()}},
		{"evm wallet on solana", Payment{"solana", "USDC", "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "1", payee},
			map[string]string{"p.wallet.address": chain.ErrSolanaAlphabet.Error()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v apperr.Validator
			tok, amt, ok := reg.CheckPayment(&v, "p", tt.p)
			if tt.want == nil {
				if !ok || v.Failed() {
					t.Fatalf("CheckPayment rejected: %v", v.Err())
				}
				if tok.Network != tt.p.Network || tok.Currency != tt.p.Currency || amt.String() != tt.p.Amount {
					t.Fatalf("CheckPayment = %+v, %s", tok, amt)
				}
				return
			}
			if ok {
				t.Fatal("CheckPayment accepted")
			}
			var e *apperr.Error
			if !errors.As(v.Err(), &e) || e.Code != apperr.ValidationFailed {
				t.Fatalf("error = %v", v.Err())
			}
			got := map[string]string{}
			for _, d := range e.Details {
				got[d.Field] = d.Reason
			}
			if len(got) != len(tt.want) {
				t.Fatalf("details = %v, want %v", got, tt.want)
			}
			for f, r := range tt.want {
				if got[f] != r {
					t.Errorf("%s: reason %q, want %q", f, got[f], r)
				}
			}
		})
	}
}

const baseConfig = `{
  "updatedAt": "2026-01-01T00:00:00Z",
  "networks": [
    {"network": "ethereum", "type": "evm", "chainId": "1"},
    {"network": "solana", "type": "solana", "chainId": "mainnet-beta"}
  ],
  "tokens": [
    {"network": "ethereum", "currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true},
    {"network": "ethereum", "currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "decimals": 6},
    {"network": "solana", "currency": "USDC", "currencyAddress": "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "decimals": 6}
  ],
  "prices": {"ETH": "3000", "USDC": "1"}
}`

func TestLoad(t *testing.T) {
	cfg, err := Load([]byte(baseConfig))
	if err != nil {
		t.Fatalf("base config: %v", err)
	}
	if len(cfg.Registry.Tokens("")) != 3 {
		t.Fatalf("tokens = %+v", cfg.Registry.Tokens(""))
	}

	tests := []struct {
		name string
		old  string // replaced in baseConfig
		new  string
		want []string // substrings of the error
	}{
		{"unknown top-level field", `"prices"`, `"extra": 1, "prices"`, []string{`unknown field "extra"`}},
		{"unknown token field", `"decimals": 6}`, `"decimals": 6, "symbol": "x"}`, []string{`unknown field "symbol"`}},
		{"trailing data", `"USDC": "1"}
}`, `"USDC": "1"}
} {}`, []string{"unexpected data after"}},
		{"numeric price", `"ETH": "3000"`, `"ETH": 3000`, []string{"prices.ETH must be a decimal string"}},
		{"prices not an object", `"prices": {"ETH": "3000", "USDC": "1"}`, `"prices": ["ETH"]`, []string{`"prices" must be an object`}},
		{"duplicate price", `"USDC": "1"}`, `"USDC": "1", "USDC": "2"}`, []string{"prices.USDC: duplicate currency"}},
		{"missing price", `"ETH": "3000", `, ``, []string{"prices: missing a price for ETH"}},
		{"unused price", `"USDC": "1"}`, `"USDC": "1", "BTC": "60000"}`, []string{"prices.BTC: no token uses this currency"}},
		{"zero price", `"ETH": "3000"`, `"ETH": "0"`, []string{"prices.ETH: must be greater than zero"}},
		{"negative price", `"ETH": "3000"`, `"ETH": "-1"`, []string{"prices.ETH: must be a decimal string"}},
		{"exponent price", `"ETH": "3000"`, `"ETH": "3e3"`, []string{"prices.ETH: must be a decimal string"}},
		{"unknown type", `"type": "solana"`, `"type": "bitcoin"`, []string{"(1 problem(s))", "networks[1].type: unknown network type"}},
		{"bad network name", `"network": "solana", "type"`, `"network": "Solana", "type"`, []string{"networks[1].network: must be 1 to 32"}},
		{"duplicate network", `"network": "solana", "type": "solana", "chainId": "mainnet-beta"`, `"network": "ethereum", "type": "evm", "chainId": "10"`, []string{`networks[1].network: duplicate network "ethereum"`}},
		{"evm chain id leading zero", `"chainId": "1"`, `"chainId": "01"`, []string{"networks[0].chainId: must be a positive decimal integer"}},
		{"evm chain id zero", `"chainId": "1"`, `"chainId": "0"`, []string{"networks[0].chainId"}},
		{"evm chain id text", `"chainId": "1"`, `"chainId": "mainnet"`, []string{"networks[0].chainId"}},
		{"solana chain id empty", `"chainId": "mainnet-beta"`, `"chainId": ""`, []string{"networks[1].chainId: must name a cluster"}},
		{"duplicate chain id", `"network": "solana", "type": "solana", "chainId": "mainnet-beta"`, `"network": "mainnet2", "type": "evm", "chainId": "1"`,
			[]string{`networks[1].chainId: chain id 1 already used by network "ethereum"`}},
		{"bad checksum", `0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48`, `0xa0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48`, []string{"tokens[1].currencyAddress: has mixed case but an invalid EIP-55 checksum"}},
		{"bad solana address", `EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v`, `EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt10`, []string{"tokens[2].currencyAddress: must be base58"}},
		{"evm address on solana", `EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v`, `0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48`, []string{"tokens[2].currencyAddress: must be base58"}},
		{"decimals too big", `"decimals": 6}`, `"decimals": 37}`, []string{"tokens[1].decimals: must be 0 to 36"}},
		{"decimals negative", `"decimals": 6}`, `"decimals": -1}`, []string{"tokens[1].decimals: must be 0 to 36"}},
		{"decimals fractional", `"decimals": 6}`, `"decimals": 6.5}`, []string{"cannot unmarshal"}},
		{"duplicate currency", `"currency": "ETH"`, `"currency": "USDC"`, []string{`tokens[1].currency: duplicate currency "USDC" on network "ethereum"`}},
		{"duplicate address", `"currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "decimals": 6}`,
			`"currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "decimals": 6},
    {"network": "ethereum", "currency": "USDC2", "currencyAddress": "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", "decimals": 6}`,
			[]string{"tokens[2].currencyAddress: address already used by USDC"}},
		{"bad currency symbol", `"currency": "ETH"`, `"currency": "E TH"`, []string{"tokens[0].currency: must be 1 to 16"}},
		{"native wrong address", `"currency": "ETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"`,
			`"currency": "ETH", "currencyAddress": "0x0000000000000000000000000000000000000000"`,
			[]string{"tokens[0].currencyAddress: a native currency must use 0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE"}},
		{"token on native address", `"currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"`,
			`"currency": "USDC", "currencyAddress": "0xeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"`,
			[]string{"tokens[1].currencyAddress: 0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE is reserved for the native currency"}},
		{"solana native wrong address", `{"network": "solana", "currency": "USDC", "currencyAddress": "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "decimals": 6}`,
			`{"network": "solana", "currency": "USDC", "currencyAddress": "EPjFWdd5AufqSSqeM2qN1xzybapC8G4wEGGkZwyTDt1v", "decimals": 6, "native": true}`,
			[]string{"tokens[2].currencyAddress: a native currency must use 11111111111111111111111111111111"}},
		{"two natives", `"currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "decimals": 6}`,
			`"currency": "USDC", "currencyAddress": "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48", "decimals": 6},
    {"network": "ethereum", "currency": "WETH", "currencyAddress": "0xEeeeeEeeeEeEeeEeEeEeeEEEeeeeEeeeeeeeEEeE", "decimals": 18, "native": true}`,
			[]string{`tokens[2].native: network "ethereum" already has a native currency`}},
		{"missing updatedAt", `"updatedAt": "2026-01-01T00:00:00Z",`, ``, []string{"updatedAt: is required"}},
		{"bad updatedAt", `2026-01-01T00:00:00Z`, `2026-01-01 00:00`, []string{"updatedAt: must be an RFC 3339 time"}},
		{"rpcUrl not a URL", `"chainId": "1"}`, `"chainId": "1", "rpcUrl": "localhost:8545"}`, []string{"networks[0].rpcUrl: must be"}},
		{"rpcUrl ws on solana", `"chainId": "mainnet-beta"}`, `"chainId": "mainnet-beta", "rpcUrl": "wss://x.example/KEY"}`, []string{"networks[1].rpcUrl: must be an http or https URL"}},
		{"confirmations zero", `"chainId": "1"}`, `"chainId": "1", "confirmations": 0}`, []string{"networks[0].confirmations: must be an integer of at least 1"}},
		{"confirmations fractional", `"chainId": "1"}`, `"chainId": "1", "confirmations": 1.5}`, []string{"cannot unmarshal"}},
		{"pollInterval not a duration", `"chainId": "1"}`, `"chainId": "1", "pollInterval": "2"}`, []string{"networks[0].pollInterval: must be a Go duration"}},
		{"pollInterval too short", `"chainId": "1"}`, `"chainId": "1", "pollInterval": "1ms"}`, []string{"networks[0].pollInterval"}},
		{"depositFactory without rpcUrl", `"chainId": "1"}`, `"chainId": "1", "depositFactory": "0x5f4eC3Df9cbd43714FE2740f5E3616155c5b8419"}`, []string{"networks[0].depositFactory: needs the network's rpcUrl"}},
		{"depositFactory not an address", `"chainId": "1"}`, `"chainId": "1", "rpcUrl": "https://rpc.example", "depositFactory": "0x5f4e"}`, []string{"networks[0].depositFactory: must be an EVM address"}},
		{"depositFactory bad checksum", `"chainId": "1"}`, `"chainId": "1", "rpcUrl": "https://rpc.example", "depositFactory": "0x5F4eC3Df9cbd43714FE2740f5E3616155c5b8419"}`, []string{"networks[0].depositFactory: must be an EVM address"}},
		{"depositFactory zero", `"chainId": "1"}`, `"chainId": "1", "rpcUrl": "https://rpc.example", "depositFactory": "0x0000000000000000000000000000000000000000"}`, []string{"networks[0].depositFactory: must not be the zero address"}},
		{"depositFactory on solana", `"chainId": "mainnet-beta"}`, `"chainId": "mainnet-beta", "rpcUrl": "https://x.example", "depositFactory": "0x5f4eC3Df9cbd43714FE2740f5E3616155c5b8419"}`, []string{"networks[1].depositFactory: deposit addresses exist on evm networks only"}},
		{"feed without rpcUrl", `"prices": {"ETH": "3000", "USDC": "1"}`,
			`"prices": {"USDC": "1"}, "priceFeeds": [{"currency": "ETH", "network": "ethereum", "address": "0x5f4eC3Df9cbd43714FE2740f5E3616155c5b8419", "maxAge": "1h"}]`,
			[]string{"priceFeeds[0].network: the network has no rpcUrl"}},
		{"feed problems", `"prices": {"ETH": "3000", "USDC": "1"}`,
			`"prices": {"ETH": "3000", "USDC": "1"}, "priceFeeds": [{"currency": "BTC", "network": "solana", "address": "0x5f4e", "maxAge": "-1h"}]`,
			[]string{"priceFeeds[0].currency: no token uses this currency", "priceFeeds[0].network: price feeds are read on evm networks", "priceFeeds[0].address", "priceFeeds[0].maxAge: must be a positive Go duration"}},
		{"several problems at once", `"ETH": "3000"`, `"ETH": "0", "XYZ": "1"`,
			[]string{"(2 problem(s))", "prices.ETH: must be greater than zero", "prices.XYZ: no token uses this currency"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(baseConfig, tt.old) {
				t.Fatalf("test edit %q not found in base config", tt.old)
			}
			cfg, err := Load([]byte(strings.Replace(baseConfig, tt.old, tt.new, 1)))
			if err == nil {
				t.Fatalf("Load accepted: %+v", cfg.Registry.Tokens(""))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestLoadEmptyNetworks(t *testing.T) {
	_, err := Load([]byte(`{"updatedAt": "2026-01-01T00:00:00Z", "networks": [], "tokens": [], "prices": {}}`))
	if err == nil || !strings.Contains(err.Error(), "networks: must list at least one network") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadNormalisesEVMAddresses(t *testing.T) {
	cfg, err := Load([]byte(strings.Replace(baseConfig, "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48",
		"0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", 1)))
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := cfg.Registry.Token("ethereum", "USDC")
	if tok.CurrencyAddress != "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48" {
		t.Errorf("address = %s, want EIP-55 form", tok.CurrencyAddress)
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "finance.json")
	if err := os.WriteFile(good, []byte(baseConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadFile(good); err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.json")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(strings.Replace(baseConfig, `"ETH": "3000"`, `"ETH": "0"`, 1)), 0o600)
	if _, err := LoadFile(bad); err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "prices.ETH") {
		t.Errorf("bad file error = %v", err)
	}
	huge := filepath.Join(dir, "huge.json")
	os.WriteFile(huge, []byte(`{"x":"`+strings.Repeat("a", MaxConfigBytes)+`"}`), 0o600)
	if _, err := LoadFile(huge); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("huge file error = %v", err)
	}
	// The shipped default, loaded from disk as an operator would.
	if _, err := LoadFile("default.json"); err != nil {
		t.Errorf("default.json: %v", err)
	}
}

func TestTokenJSON(t *testing.T) {
	tok, _ := Default().Registry.Token("ethereum", "USDC")
	b, _ := json.Marshal(tok)
	want := `{"network":"ethereum","currency":"USDC","currencyAddress":"0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48","decimals":6,"native":false}`
	if string(b) != want {
		t.Errorf("json = %s\nwant   %s", b, want)
	}
}

func FuzzLoad(f *testing.F) {
	f.Add([]byte(baseConfig))
	data, _ := os.ReadFile("default.json")
	f.Add(data)
	f.Add([]byte(`{"prices": {"A": "1", "A": "2"}}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Load(data)
		if err != nil {
			return
		}
		// Whatever loads must uphold the registry's invariants.
		for _, tok := range cfg.Registry.Tokens("") {
			n, ok := cfg.Registry.Network(tok.Network)
			if !ok || chain.ValidateAddress(n.Type, tok.CurrencyAddress) != nil {
				t.Fatalf("loaded invalid token %+v", tok)
			}
			p, _, err := cfg.Prices.Price(t.Context(), tok.Currency)
			if err != nil || p.Sign() <= 0 {
				t.Fatalf("token %+v has price %v, %v", tok, p, err)
			}
		}
	})
}

func TestLoadChainSide(t *testing.T) {
	withRPC := strings.Replace(baseConfig, `"chainId": "1"}`, `"chainId": "1", "rpcUrl": "https://rpc.example/v3/KEY", "confirmations": 12, "pollInterval": "4s"}`, 1)
	cfg, err := Load([]byte(withRPC))
	if err != nil {
		t.Fatal(err)
	}
	eth, _ := cfg.Registry.Network("ethereum")
	sol, _ := cfg.Registry.Network("solana")
	if eth.RPCURL != "https://rpc.example/v3/KEY" || eth.Confirmations != 12 || eth.PollInterval != 4*time.Second || !eth.Verified() {
		t.Fatalf("ethereum: %+v", eth)
	}
	if sol.RPCURL != "" || sol.Confirmations != DefaultConfirmations || sol.PollInterval != DefaultPollInterval || sol.Verified() {
		t.Fatalf("solana defaults: %+v", sol)
	}
	if b, _ := json.Marshal(eth); strings.Contains(string(b), "KEY") {
		t.Fatalf("a network's JSON shows its rpcUrl: %s", b)
	}
	if eth.DepositFactory != "" {
		t.Fatalf("depositFactory without one configured: %q", eth.DepositFactory)
	}
	withFactory := strings.Replace(withRPC, `"pollInterval": "4s"}`, `"pollInterval": "4s", "depositFactory": "0x5f4ec3df9cbd43714fe2740f5e3616155c5b8419"}`, 1)
	cfg, err = Load([]byte(withFactory))
	if err != nil {
		t.Fatal(err)
	}
	if eth, _ := cfg.Registry.Network("ethereum"); eth.DepositFactory != "0x5f4eC3Df9cbd43714FE2740f5E3616155c5b8419" {
		t.Fatalf("depositFactory = %q, want the EIP-55 form", eth.DepositFactory)
	}

	feed := `"priceFeeds": [{"currency": "ETH", "network": "ethereum", "address": "0x5f4ec3df9cbd43714fe2740f5e3616155c5b8419", "maxAge": "1h"}]`
	cfg, err = Load([]byte(strings.Replace(withRPC, `"prices": {"ETH": "3000", "USDC": "1"}`, `"prices": {"USDC": "1"}, `+feed, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Feeds) != 1 || cfg.Feeds[0] != (PriceFeed{Currency: "ETH", Network: "ethereum", Address: "0x5f4eC3Df9cbd43714FE2740f5E3616155c5b8419", MaxAge: time.Hour}) {
		t.Fatalf("feeds = %+v", cfg.Feeds)
	}
	// A feed's currency has no file price: two prices would be ambiguous.
	_, err = Load([]byte(strings.Replace(withRPC, `"prices": {"ETH": "3000", "USDC": "1"}`, `"prices": {"ETH": "3000", "USDC": "1"}, `+feed, 1)))
	if err == nil || !strings.Contains(err.Error(), "prices.ETH: has a price feed") {
		t.Fatalf("feed and file price: %v", err)
	}
	dup := strings.Replace(feed, `]`, `, {"currency": "ETH", "network": "ethereum", "address": "0x5f4ec3df9cbd43714fe2740f5e3616155c5b8419", "maxAge": "1h"}]`, 1)
	_, err = Load([]byte(strings.Replace(withRPC, `"prices": {"ETH": "3000", "USDC": "1"}`, `"prices": {"USDC": "1"}, `+dup, 1)))
	if err == nil || !strings.Contains(err.Error(), "priceFeeds[1].currency: duplicate feed for ETH") {
		t.Fatalf("duplicate feed: %v", err)
	}
}
