package netguard

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// Defaults for Options fields left zero.
const (
	DefaultTimeout               = 10 * time.Second
	DefaultDialTimeout           = 5 * time.Second
	DefaultTLSHandshakeTimeout   = 5 * time.Second
	DefaultResponseHeaderTimeout = 10 * time.Second
	DefaultMaxIdleConnsPerHost   = 64
	DefaultMaxIdleConns          = 4096

	// DefaultBodyLimit is how much of a receiver's response is worth keeping:
	// enough for an error message in the delivery log, no more.
	DefaultBodyLimit = 4 << 10

	// maxResponseHeaderBytes caps what a hostile receiver can make us buffer
	// before the body; real receivers send a few hundred bytes.
	maxResponseHeaderBytes = 64 << 10
	// maxDrain is how much unread body ReadLimited discards to keep a
	// connection reusable; past that, closing is cheaper than reading on.
	maxDrain = 64 << 10
)

// ErrForbiddenAddress is matched (errors.Is) by the error a request fails
// with when the destination resolves to an address that is not public.
var ErrForbiddenAddress = errors.New("netguard: connection to a non-public address refused")

// ForbiddenAddressError is the dial-time refusal; Addr is the resolved
// address, for server logs. Where a business can see a delivery's failure,
// record a fixed reason rather than err.Error(): the net/http wrappers around
// this error name the address, and what a name resolves to inside our network
// is not theirs to learn.
type ForbiddenAddressError struct {
	Network string
	Addr    string
}

func (e *ForbiddenAddressError) Error() string { return ErrForbiddenAddress.Error() }

// Is makes errors.Is(err, ErrForbiddenAddress) true through the url.Error and
// net.OpError wrappers net/http adds.
func (e *ForbiddenAddressError) Is(target error) bool { return target == ErrForbiddenAddress }

// Options configures NewClient. Zero values take the defaults above.
type Options struct {
	// AllowPrivate permits non-public destinations (local development and
	// tests only).
	AllowPrivate bool
	// Timeout bounds a whole request: dial, TLS, headers and reading the body.
	Timeout time.Duration
	// DialTimeout bounds one TCP connect.
	DialTimeout time.Duration
	// TLSHandshakeTimeout bounds the TLS handshake.
	TLSHandshakeTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers after the
	// request is written.
	ResponseHeaderTimeout time.Duration
	// MaxIdleConnsPerHost is the keep-alive pool per receiver; thousands of
	// deliveries a second to a few big receivers would otherwise churn TLS
	// handshakes.
	MaxIdleConnsPerHost int
	// MaxIdleConns is the keep-alive pool across all receivers.
	MaxIdleConns int
	// TLSConfig, if set, is cloned and used for outbound TLS (custom roots in
	// tests, say). MinVersion is raised to TLS 1.2 if lower.
	TLSConfig *tls.Config
}

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Timeout, DefaultTimeout)
	def(&o.DialTimeout, DefaultDialTimeout)
	def(&o.TLSHandshakeTimeout, DefaultTLSHandshakeTimeout)
	def(&o.ResponseHeaderTimeout, DefaultResponseHeaderTimeout)
	if o.MaxIdleConnsPerHost <= 0 {
		o.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	}
	if o.MaxIdleConns <= 0 {
		o.MaxIdleConns = DefaultMaxIdleConns
	}
	return o
}

// NewClient returns an HTTP client for webhook delivery. Every connection it
// opens is checked against IsPublicIP (unless AllowPrivate) on the resolved
// address, it ignores proxy settings from the environment, and it follows no
// redirects: a 3xx comes back as the response, which the caller counts as a
// failed (non-2xx) attempt.
//
// Share one client across deliveries so connections are reused.
func NewClient(opts Options) *http.Client {
	o := opts.withDefaults()
	dialer := &net.Dialer{
		Timeout:   o.DialTimeout,
		KeepAlive: 30 * time.Second,
		Control:   dialControl(o.AllowPrivate),
	}
	tlsConfig := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.TLSConfig != nil {
		tlsConfig = o.TLSConfig.Clone()
		if tlsConfig.MinVersion < tls.VersionTLS12 {
			tlsConfig.MinVersion = tls.VersionTLS12
		}
	}
	transport := &http.Transport{
		// nil, not http.ProxyFromEnvironment: a proxy would make the
		// connection we check be to the proxy, not to the receiver.
		Proxy:                  nil,
		DialContext:            dialer.DialContext,
		ForceAttemptHTTP2:      true, // a custom DialContext disables it otherwise
		TLSClientConfig:        tlsConfig,
		TLSHandshakeTimeout:    o.TLSHandshakeTimeout,
		ResponseHeaderTimeout:  o.ResponseHeaderTimeout,
		ExpectContinueTimeout:  time.Second,
		MaxIdleConns:           o.MaxIdleConns,
		MaxIdleConnsPerHost:    o.MaxIdleConnsPerHost,
		IdleConnTimeout:        90 * time.Second,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   o.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// dialControl runs after DNS resolution, once per connection attempt (each
// address happy-eyeballs tries included), with the literal address about to
// be connected to. That is what makes it immune to DNS rebinding.
func dialControl(allowPrivate bool) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		if allowPrivate {
			return nil
		}
		// Only TCP is ever dialed for HTTP; refuse anything else rather
		// than reason about it.
		if network != "tcp4" && network != "tcp6" {
			return &ForbiddenAddressError{Network: network, Addr: address}
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil || !IsPublicIP(ap.Addr()) {
			return &ForbiddenAddressError{Network: network, Addr: address}
		}
		return nil
	}
}

// ReadLimited returns at most n bytes of resp's body (DefaultBodyLimit if n
// <= 0), then discards a bounded amount of what is left, so the connection
// can go back to the pool, and closes the body. A body larger than n is
// truncated without error. The client's Timeout still bounds the reading.
func ReadLimited(resp *http.Response, n int64) ([]byte, error) {
	if resp == nil || resp.Body == nil {
		return nil, nil
	}
	defer resp.Body.Close()
	if n <= 0 {
		n = DefaultBodyLimit
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, n))
	if err != nil {
		return b, err
	}
	_, _ = io.CopyN(io.Discard, resp.Body, maxDrain)
	return b, nil
}
