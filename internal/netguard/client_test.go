package netguard

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func okServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

func post(c *http.Client, url string) (*http.Response, error) {
	return c.Post(url, "application/json", strings.NewReader(`{"id":"evt_1"}`))
}

func TestClientRefusesLoopback(t *testing.T) {
	srv, hits := okServer(t) // listens on 127.0.0.1
	c := NewClient(Options{})
	resp, err := post(c, srv.URL)
	if err == nil {
		resp.Body.Close()
		t.Fatal("guarded client reached a loopback server")
	}
	if !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("err = %v, want errors.Is ErrForbiddenAddress", err)
	}
	var fe *ForbiddenAddressError
	if !errors.As(err, &fe) || !strings.HasPrefix(fe.Addr, "127.0.0.1:") || fe.Network != "tcp4" {
		t.Fatalf("ForbiddenAddressError = %+v", fe)
	}
	if fe.Error() != ErrForbiddenAddress.Error() {
		t.Fatalf("message %q names more than the reason", fe.Error())
	}
	if hits.Load() != 0 {
		t.Fatal("server was hit")
	}
}

// A name that passes no URL check but resolves to loopback is still refused:
// the guard judges the resolved address at connect time.
func TestClientChecksResolvedAddress(t *testing.T) {
	srv, hits := okServer(t)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	c := NewClient(Options{})
	resp, err := post(c, "http://localhost:"+port+"/hook")
	if err == nil {
		resp.Body.Close()
		t.Fatal("guarded client reached localhost")
	}
	if !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("err = %v, want ErrForbiddenAddress", err)
	}
	if hits.Load() != 0 {
		t.Fatal("server was hit")
	}
}

func TestClientAllowPrivateReaches(t *testing.T) {
	srv, hits := okServer(t)
	c := NewClient(Options{AllowPrivate: true})
	for range 3 {
		resp, err := post(c, srv.URL)
		if err != nil {
			t.Fatalf("AllowPrivate: %v", err)
		}
		if _, err := ReadLimited(resp, 0); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	if hits.Load() != 3 {
		t.Fatalf("hits = %d, want 3", hits.Load())
	}
}

func TestClientTLS(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	tlsConf := &tls.Config{RootCAs: pool}

	_, err := post(NewClient(Options{TLSConfig: tlsConf}), srv.URL)
	if !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("https to loopback: err = %v, want ErrForbiddenAddress", err)
	}
	if hits.Load() != 0 {
		t.Fatal("server was hit")
	}

	resp, err := post(NewClient(Options{AllowPrivate: true, TLSConfig: tlsConf}), srv.URL)
	if err != nil {
		t.Fatalf("AllowPrivate https: %v", err)
	}
	ReadLimited(resp, 0)
	if resp.StatusCode != http.StatusOK || hits.Load() != 1 {
		t.Fatalf("status %d, hits %d", resp.StatusCode, hits.Load())
	}
	if tlsConf.MinVersion != 0 {
		t.Fatal("caller's tls.Config was modified")
	}
}

func TestClientIPv6Loopback(t *testing.T) {
	ln, err := net.Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	defer srv.Close()

	_, err = post(NewClient(Options{}), srv.URL)
	if !errors.Is(err, ErrForbiddenAddress) {
		t.Fatalf("err = %v, want ErrForbiddenAddress", err)
	}
	resp, err := post(NewClient(Options{AllowPrivate: true}), srv.URL)
	if err != nil {
		t.Fatalf("AllowPrivate: %v", err)
	}
	ReadLimited(resp, 0)
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	target, targetHits := okServer(t)
	for _, code := range []int{
		http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther,
		http.StatusTemporaryRedirect, http.StatusPermanentRedirect,
	} {
		redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, target.URL+"/elsewhere", code)
		}))
		resp, err := post(NewClient(Options{AllowPrivate: true}), redirector.URL)
		redirector.Close()
		if err != nil {
			t.Fatalf("%d: err = %v; a redirect must come back as the response", code, err)
		}
		ReadLimited(resp, 0)
		if resp.StatusCode != code {
			t.Fatalf("status = %d, want %d", resp.StatusCode, code)
		}
		if resp.StatusCode >= 200 && resp.StatusCode < 300 {
			t.Fatal("a redirect must not look like success")
		}
		if loc := resp.Header.Get("Location"); !strings.HasSuffix(loc, "/elsewhere") {
			t.Fatalf("Location = %q", loc)
		}
	}
	if targetHits.Load() != 0 {
		t.Fatalf("redirect target was hit %d times", targetHits.Load())
	}
}

func TestClientTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	c := NewClient(Options{AllowPrivate: true, Timeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := post(c, srv.URL)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %v", d)
	}
}

func TestClientResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c := NewClient(Options{AllowPrivate: true, ResponseHeaderTimeout: 100 * time.Millisecond})
	_, err := post(c, srv.URL)
	if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("err = %v, want response header timeout", err)
	}
}

func TestClientConfiguration(t *testing.T) {
	c := NewClient(Options{})
	if c.Timeout != 10*time.Second {
		t.Errorf("Timeout = %v", c.Timeout)
	}
	if c.CheckRedirect == nil || c.CheckRedirect(nil, nil) != http.ErrUseLastResponse {
		t.Error("CheckRedirect must return http.ErrUseLastResponse")
	}
	tr, ok := c.Transport.(*http.Transport)
	if !ok {
		t.Fatalf("Transport is %T", c.Transport)
	}
	if tr.Proxy != nil {
		t.Error("Transport.Proxy must be nil (no proxy from environment)")
	}
	if tr.TLSHandshakeTimeout != 5*time.Second || tr.ResponseHeaderTimeout != 10*time.Second {
		t.Errorf("TLS %v, header %v", tr.TLSHandshakeTimeout, tr.ResponseHeaderTimeout)
	}
	if tr.MaxIdleConnsPerHost != DefaultMaxIdleConnsPerHost || tr.MaxIdleConns != DefaultMaxIdleConns {
		t.Errorf("idle pool %d/%d", tr.MaxIdleConnsPerHost, tr.MaxIdleConns)
	}
	if tr.TLSClientConfig == nil || tr.TLSClientConfig.MinVersion < tls.VersionTLS12 {
		t.Error("TLS 1.2 minimum not set")
	}
	if !tr.ForceAttemptHTTP2 {
		t.Error("HTTP/2 not attempted")
	}

	c = NewClient(Options{Timeout: 3 * time.Second, MaxIdleConnsPerHost: 7,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS10}})
	tr = c.Transport.(*http.Transport)
	if c.Timeout != 3*time.Second || tr.MaxIdleConnsPerHost != 7 {
		t.Errorf("options not applied: %v %d", c.Timeout, tr.MaxIdleConnsPerHost)
	}
	if tr.TLSClientConfig.MinVersion != tls.VersionTLS12 {
		t.Error("a weaker MinVersion was not raised")
	}
}

func TestDialControl(t *testing.T) {
	strict, lenient := dialControl(false), dialControl(true)
	cases := []struct {
		network, address string
		ok               bool
	}{
		{"tcp4", "8.8.8.8:443", true},
		{"tcp6", "[2606:4700:4700::1111]:443", true},
		{"tcp4", "127.0.0.1:443", false},
		{"tcp4", "169.254.169.254:80", false},
		{"tcp6", "[::1]:443", false},
		{"tcp6", "[::ffff:127.0.0.1]:443", false},
		{"tcp6", "[::ffff:8.8.8.8]:443", true},
		{"tcp6", "[fe80::1%eth0]:443", false},
		{"tcp6", "[64:ff9b::a9fe:a9fe]:80", false},
		{"tcp4", "0.0.0.0:80", false},
		{"udp4", "8.8.8.8:53", false},
		{"unix", "/var/run/docker.sock", false},
		{"tcp4", "not-an-address", false},
		{"tcp4", "example.com:443", false},
		{"tcp4", "", false},
	}
	for _, c := range cases {
		err := strict(c.network, c.address, nil)
		if c.ok && err != nil {
			t.Errorf("strict(%s, %s) = %v, want ok", c.network, c.address, err)
		}
		if !c.ok && !errors.Is(err, ErrForbiddenAddress) {
			t.Errorf("strict(%s, %s) = %v, want ErrForbiddenAddress", c.network, c.address, err)
		}
		if err := lenient(c.network, c.address, nil); err != nil {
			t.Errorf("lenient(%s, %s) = %v", c.network, c.address, err)
		}
	}
}

type trackingBody struct {
	io.Reader
	closed bool
	read   int
}

func (b *trackingBody) Read(p []byte) (int, error) {
	n, err := b.Reader.Read(p)
	b.read += n
	return n, err
}

func (b *trackingBody) Close() error { b.closed = true; return nil }

func TestReadLimited(t *testing.T) {
	mk := func(n int) (*http.Response, *trackingBody) {
		b := &trackingBody{Reader: bytes.NewReader(bytes.Repeat([]byte("x"), n))}
		return &http.Response{Body: b}, b
	}

	resp, b := mk(10)
	got, err := ReadLimited(resp, 4096)
	if err != nil || len(got) != 10 || !b.closed {
		t.Fatalf("small body: %d bytes, err %v, closed %v", len(got), err, b.closed)
	}

	resp, b = mk(10_000)
	got, err = ReadLimited(resp, 4096)
	if err != nil || len(got) != 4096 || !b.closed {
		t.Fatalf("large body: %d bytes, err %v, closed %v", len(got), err, b.closed)
	}
	if b.read != 10_000 {
		t.Fatalf("a modest remainder should be drained for reuse; read %d", b.read)
	}

	resp, b = mk(10 << 20)
	got, err = ReadLimited(resp, 0)
	if err != nil || len(got) != DefaultBodyLimit || !b.closed {
		t.Fatalf("default limit: %d bytes, err %v, closed %v", len(got), err, b.closed)
	}
	if b.read > DefaultBodyLimit+maxDrain {
		t.Fatalf("drained %d bytes of a huge body; must stop at %d", b.read, DefaultBodyLimit+maxDrain)
	}

	resp = &http.Response{Body: io.NopCloser(io.MultiReader(strings.NewReader("abc"), errReader{}))}
	got, err = ReadLimited(resp, 100)
	if err == nil || string(got) != "abc" {
		t.Fatalf("read error: got %q, err %v", got, err)
	}

	if got, err := ReadLimited(nil, 10); got != nil || err != nil {
		t.Fatal("nil response")
	}
	if got, err := ReadLimited(&http.Response{}, 10); got != nil || err != nil {
		t.Fatal("nil body")
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("boom") }

func TestReadLimitedOverNetworkAllowsReuse(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write(bytes.Repeat([]byte("e"), 8<<10))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()

	c := NewClient(Options{AllowPrivate: true})
	for range 5 {
		resp, err := post(c, srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, err := ReadLimited(resp, 4<<10)
		if err != nil || len(body) != 4<<10 {
			t.Fatalf("body %d, err %v", len(body), err)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("opened %d connections for 5 sequential requests; want reuse", n)
	}
}
