// Package config reads the service's configuration from VOUCHER_*
// environment variables, overridable by command-line flags, and validates it
// at start so a bad setting stops the process with a clear message instead
// of surfacing later as a strange failure.
package config

import (
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/voucherd/voucherd/internal/ratelimit"
)

// Environments.
const (
	Development = "development"
	Production  = "production"
)

// Config is the whole configuration. Secrets are kept as raw strings and
// never printed (see Redacted).
type Config struct {
	Addr        string
	DatabaseURL string
	DBMaxConns  int
	// DBPrepare runs the hot statements prepared (storage.Options).
	DBPrepare            bool
	Env                  string
	JWTSecret            string
	JWTIssuer            string
	JWTAudience          string
	EncryptionKey        string
	RateLimits           string
	WebhookAllowPrivate  bool
	WebhookRetryInterval time.Duration
	WebhookWorkers       int
	VoucherTTL           time.Duration
	SessionTTL           time.Duration
	ResourceTokenTTL     time.Duration
	FinanceFile          string
	FXSpreadBps          int
	// TrustReceipts lets production start with networks that have tokens
	// and no rpcUrl (their receipts unchecked: unsafe).
	TrustReceipts bool
	// PriceMaxAge: in production a file price older than this (against the
	// finance file's updatedAt) is no price.
	PriceMaxAge time.Duration
	// RPCTimeout bounds each request to a network's node.
	RPCTimeout time.Duration
	// SweepKey is VOUCHER_SWEEP_KEY (hex; a secret): the account that
	// pays the gas of sweeping deposit addresses. Empty: no sweeping.
	SweepKey       string
	TrustedProxies string
	// CORSOrigins are the browser origins allowed to call /api/v1 and
	// /graphql (parsed and normalised by Load).
	CORSOrigins     []string
	LogLevel        string
	ShutdownTimeout time.Duration
	SweepInterval   time.Duration
	// SettlementWindow is how long a verified settlement may wait for a
	// confirmed payment before it FAILED.
	SettlementWindow time.Duration
	// GraphQLTimeBudget bounds one GraphQL query or mutation, from its
	// arrival to its answer.
	GraphQLTimeBudget time.Duration
	// PprofAddr, when set, serves net/http/pprof on its own listener (never
	// on the API address), for profiling under load.
	PprofAddr string
	// PublicURL is the service's public base URL; checkout URLs are made
	// from it (internal/widget).
	PublicURL string
	// PubSubURL, when set, names the NATS servers that carry the
	// cross-replica notifications instead of LISTEN/NOTIFY
	// (internal/pubsub/natsbus). It may hold credentials: never printed.
	PubSubURL string
}

// Var documents one setting; the README's table is written from this list.
type Var struct {
	Env, Flag, Default, Help string
}

// Vars lists every setting with its default.
var Vars = []Var{
	{"VOUCHER_ADDR", "addr", "127.0.0.1:8080", "listen address (host:port)"},
	{"VOUCHER_DATABASE_URL", "database-url", "sqlite://./data/voucherd.db", "sqlite://PATH for the embedded database, or postgres://... for PostgreSQL"},
	{"VOUCHER_DB_MAX_CONNS", "db-max-conns", "32", "PostgreSQL connection pool size"},
	{"VOUCHER_DB_PREPARE", "db-prepare", "true", "run the hot statements as prepared statements; false behind a transaction-pooling proxy without prepared-statement support"},
	{"VOUCHER_ENV", "env", Development, "development or production (production requires explicit secrets and hides introspection)"},
	{"VOUCHER_JWT_SECRET", "jwt-secret", "", "HS256 signing secret, at least 32 bytes; generated once and stored in the database when unset in development"},
	{"VOUCHER_JWT_ISSUER", "jwt-issuer", "voucherd", "JWT iss claim"},
	{"VOUCHER_JWT_AUDIENCE", "jwt-audience", "voucherd", "JWT aud claim"},
	{"VOUCHER_ENCRYPTION_KEY", "encryption-key", "", "base64 of 32 bytes; encrypts secrets at rest; generated once and stored in the database when unset in development"},
	{"VOUCHER_RATE_LIMITS", "rate-limits", "spec", "spec, off, or a multiplier of the spec's limits such as 10"},
	{"VOUCHER_WEBHOOK_ALLOW_PRIVATE", "webhook-allow-private", "false", "allow http:// and private/loopback webhook targets (local development and tests only)"},
	{"VOUCHER_WEBHOOK_RETRY_INTERVAL", "webhook-retry-interval", "30s", "time between automatic webhook retries"},
	{"VOUCHER_WEBHOOK_WORKERS", "webhook-workers", "16", "concurrent webhook deliveries per replica"},
	{"VOUCHER_VOUCHER_TTL", "voucher-ttl", "15m", "voucher lifetime from reservation"},
	{"VOUCHER_SESSION_TTL", "session-ttl", "10m", "payer context (voucher session) lifetime"},
	{"VOUCHER_RESOURCE_TOKEN_TTL", "resource-token-ttl", "15m", "resource token lifetime (never past its context's expiry)"},
	{"VOUCHER_FINANCE_FILE", "finance-file", "", "token registry and price file (JSON); the built-in development default when unset"},
	{"VOUCHER_FX_SPREAD_BPS", "fx-spread-bps", "0", "FX spread in basis points added to negotiated amounts"},
	{"VOUCHER_TRUST_RECEIPTS", "trust-receipts", "false", "UNSAFE: in production, start even when a network with tokens has no rpcUrl (its receipts are then not checked on chain)"},
	{"VOUCHER_PRICE_MAX_AGE", "price-max-age", "24h", "in production, a finance-file price older than this (against the file's updatedAt) is no price (400 rate_unavailable)"},
	{"VOUCHER_RPC_TIMEOUT", "rpc-timeout", "10s", "bound on each request to a network's JSON-RPC node (and on the chain id check at start)"},
	{"VOUCHER_SWEEP_KEY", "sweep-key", "", "hex private key of an account that only pays gas: flushes each checkout's deposit address to its payout wallet (networks with a depositFactory); unset: no sweeping"},
	{"VOUCHER_TRUSTED_PROXIES", "trusted-proxies", "", "comma-separated CIDRs whose X-Forwarded-For is trusted for client addresses"},
	{"VOUCHER_CORS_ORIGINS", "cors-origins", "", "comma-separated browser origins (scheme://host[:port]) allowed to call /api/v1 and /graphql and to open its websocket; empty = no cross-origin access"},
	{"VOUCHER_LOG_LEVEL", "log-level", "info", "debug, info, warn or error"},
	{"VOUCHER_SHUTDOWN_TIMEOUT", "shutdown-timeout", "20s", "how long a graceful shutdown may take"},
	{"VOUCHER_GRAPHQL_TIME_BUDGET", "graphql-time-budget", "1s", "how long one GraphQL query or mutation may take before its unresolved fields are answered unavailable (docs/hardening.md)"},
	{"VOUCHER_SWEEP_INTERVAL", "sweep-interval", "5s", "how often expired vouchers and sessions are recorded"},
	{"VOUCHER_SETTLEMENT_WINDOW", "settlement-window", "1h", "how long after resolve a payment on a verified network may take to confirm; a settlement with nothing confirmed by then is FAILED"},
	{"VOUCHER_PUBLIC_URL", "public-url", "", "public base URL of the service (https://pay.example.com); checkout URLs start with it; unset: the address the create-checkout request came to (development)"},
	{"VOUCHER_PUBSUB_URL", "pubsub-url", "", "nats://host:port[,nats://host:port...]: carry cross-replica notifications (voucher changes, ended sessions and memberships, webhook wake-ups) over NATS instead of PostgreSQL LISTEN/NOTIFY (PostgreSQL only; docs/scaling.md)"},
	{"VOUCHER_PPROF_ADDR", "pprof-addr", "", "serve net/http/pprof on this separate host:port (profiling; empty = off, keep it on loopback)"},
}

// Load reads the environment (getenv) and then args as flags.
func Load(args []string, getenv func(string) string) (*Config, error) {
	fs := flag.NewFlagSet("voucherd", flag.ContinueOnError)
	vals := map[string]*string{}
	for _, v := range Vars {
		def := v.Default
		if e := getenv(v.Env); e != "" {
			def = e
		}
		vals[v.Env] = fs.String(v.Flag, def, v.Help+" ($"+v.Env+")")
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	get := func(env string) string { return strings.TrimSpace(*vals[env]) }

	var errs []error
	bad := func(env, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", env, fmt.Sprintf(format, a...)))
	}
	dur := func(env string) time.Duration {
		d, err := time.ParseDuration(get(env))
		if err != nil || d <= 0 {
			bad(env, "want a positive Go duration like 30s or 15m, got %q", get(env))
		}
		return d
	}
	posInt := func(env string) int {
		n, err := strconv.Atoi(get(env))
		if err != nil || n <= 0 {
			bad(env, "want a positive integer, got %q", get(env))
		}
		return n
	}
	c := &Config{
		Addr:                 get("VOUCHER_ADDR"),
		DatabaseURL:          get("VOUCHER_DATABASE_URL"),
		DBMaxConns:           posInt("VOUCHER_DB_MAX_CONNS"),
		Env:                  get("VOUCHER_ENV"),
		JWTSecret:            get("VOUCHER_JWT_SECRET"),
		JWTIssuer:            get("VOUCHER_JWT_ISSUER"),
		JWTAudience:          get("VOUCHER_JWT_AUDIENCE"),
		EncryptionKey:        get("VOUCHER_ENCRYPTION_KEY"),
		RateLimits:           get("VOUCHER_RATE_LIMITS"),
		WebhookRetryInterval: dur("VOUCHER_WEBHOOK_RETRY_INTERVAL"),
		WebhookWorkers:       posInt("VOUCHER_WEBHOOK_WORKERS"),
		VoucherTTL:           dur("VOUCHER_VOUCHER_TTL"),
		SessionTTL:           dur("VOUCHER_SESSION_TTL"),
		ResourceTokenTTL:     dur("VOUCHER_RESOURCE_TOKEN_TTL"),
		FinanceFile:          get("VOUCHER_FINANCE_FILE"),
		PriceMaxAge:          dur("VOUCHER_PRICE_MAX_AGE"),
		RPCTimeout:           dur("VOUCHER_RPC_TIMEOUT"),
		SweepKey:             get("VOUCHER_SWEEP_KEY"),
		TrustedProxies:       get("VOUCHER_TRUSTED_PROXIES"),
		LogLevel:             strings.ToLower(get("VOUCHER_LOG_LEVEL")),
		ShutdownTimeout:      dur("VOUCHER_SHUTDOWN_TIMEOUT"),
		SweepInterval:        dur("VOUCHER_SWEEP_INTERVAL"),
		SettlementWindow:     dur("VOUCHER_SETTLEMENT_WINDOW"),
		GraphQLTimeBudget:    dur("VOUCHER_GRAPHQL_TIME_BUDGET"),
		PprofAddr:            get("VOUCHER_PPROF_ADDR"),
		PublicURL:            get("VOUCHER_PUBLIC_URL"),
		PubSubURL:            get("VOUCHER_PUBSUB_URL"),
	}
	if b, err := strconv.ParseBool(get("VOUCHER_DB_PREPARE")); err != nil {
		bad("VOUCHER_DB_PREPARE", "want true or false, got %q", get("VOUCHER_DB_PREPARE"))
	} else {
		c.DBPrepare = b
	}
	if b, err := strconv.ParseBool(get("VOUCHER_TRUST_RECEIPTS")); err != nil {
		bad("VOUCHER_TRUST_RECEIPTS", "want true or false, got %q", get("VOUCHER_TRUST_RECEIPTS"))
	} else {
		c.TrustReceipts = b
	}
	if b, err := strconv.ParseBool(get("VOUCHER_WEBHOOK_ALLOW_PRIVATE")); err != nil {
		bad("VOUCHER_WEBHOOK_ALLOW_PRIVATE", "want true or false, got %q", get("VOUCHER_WEBHOOK_ALLOW_PRIVATE"))
	} else {
		c.WebhookAllowPrivate = b
	}
	if n, err := strconv.Atoi(get("VOUCHER_FX_SPREAD_BPS")); err != nil || n < 0 || n > 10000 {
		bad("VOUCHER_FX_SPREAD_BPS", "want an integer from 0 to 10000, got %q", get("VOUCHER_FX_SPREAD_BPS"))
	} else {
		c.FXSpreadBps = n
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		bad("VOUCHER_ADDR", "want host:port, got %q", c.Addr)
	}
	if c.PublicURL != "" {
		if u, err := url.Parse(c.PublicURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			bad("VOUCHER_PUBLIC_URL", "want an absolute http(s) URL without query, got %q", c.PublicURL)
		}
	}
	if c.PprofAddr != "" {
		if _, _, err := net.SplitHostPort(c.PprofAddr); err != nil {
			bad("VOUCHER_PPROF_ADDR", "want host:port, got %q", c.PprofAddr)
		}
	}
	switch c.Env {
	case Development, Production:
	default:
		bad("VOUCHER_ENV", "want development or production, got %q", c.Env)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		bad("VOUCHER_LOG_LEVEL", "want debug, info, warn or error, got %q", c.LogLevel)
	}
	if _, err := ratelimit.ParseMode(c.RateLimits); err != nil {
		bad("VOUCHER_RATE_LIMITS", "%v", err)
	}
	if c.JWTSecret != "" && len(c.JWTSecret) < 32 {
		bad("VOUCHER_JWT_SECRET", "must be at least 32 bytes")
	}
	if c.EncryptionKey != "" {
		if k, err := base64.StdEncoding.DecodeString(c.EncryptionKey); err != nil || len(k) != 32 {
			bad("VOUCHER_ENCRYPTION_KEY", "must be base64 of exactly 32 bytes")
		}
	}
	if c.Env == Production {
		if c.JWTSecret == "" {
			bad("VOUCHER_JWT_SECRET", "required in production")
		}
		if c.EncryptionKey == "" {
			bad("VOUCHER_ENCRYPTION_KEY", "required in production")
		}
		if c.WebhookAllowPrivate {
			bad("VOUCHER_WEBHOOK_ALLOW_PRIVATE", "must be false in production")
		}
	}
	for _, cidr := range c.TrustedProxyList() {
		if _, _, err := net.ParseCIDR(cidr); err != nil {
			bad("VOUCHER_TRUSTED_PROXIES", "%q is not a CIDR", cidr)
		}
	}
	if c.DatabaseURL == "" {
		bad("VOUCHER_DATABASE_URL", "must not be empty")
	}
	if c.PubSubURL != "" {
		if err := validNATSURLs(c.PubSubURL); err != nil {
			bad("VOUCHER_PUBSUB_URL", "want nats://host:port, comma-separated for several servers: %v", err)
		} else if !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
			bad("VOUCHER_PUBSUB_URL", "needs PostgreSQL (VOUCHER_DATABASE_URL=postgres://...): replicas share one PostgreSQL, the embedded database has no other replica to tell")
		}
	}
	if origins, err := ParseOrigins(get("VOUCHER_CORS_ORIGINS")); err != nil {
		bad("VOUCHER_CORS_ORIGINS", "%v", err)
	} else {
		c.CORSOrigins = origins
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return c, nil
}

// validNATSURLs checks a comma-separated list of nats:// (or tls://)
// server URLs. The error names a server by position, never by its text (it
// may carry credentials).
func validNATSURLs(list string) error {
	for i, s := range strings.Split(list, ",") {
		u, err := url.Parse(strings.TrimSpace(s))
		if err != nil || (u.Scheme != "nats" && u.Scheme != "tls") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("server %d is not a nats://host:port URL", i+1)
		}
	}
	return nil
}

// FromEnvironment loads from the process environment and os.Args.
func FromEnvironment() (*Config, error) { return Load(os.Args[1:], os.Getenv) }

// TrustedProxyList splits TrustedProxies.
func (c *Config) TrustedProxyList() []string {
	var out []string
	for _, s := range strings.Split(c.TrustedProxies, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// IsDevelopment reports whether the development conveniences are on.
func (c *Config) IsDevelopment() bool { return c.Env == Development }

// ParseOrigins reads a comma-separated list of web origins
// (scheme://host[:port], as a browser sends them in Origin): http or https,
// no path, query, fragment or user info. They are lower-cased, as browsers
// serialise them, and duplicates are dropped. "*" is refused: every caller
// must be named.
func ParseOrigins(list string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
			u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
			return nil, fmt.Errorf("%q is not an origin (want scheme://host[:port], e.g. https://dashboard.example.com)", s)
		}
		o := strings.ToLower(u.Scheme + "://" + u.Host)
		if !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out, nil
}
