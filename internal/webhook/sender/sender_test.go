package sender_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/voucherd/voucherd/internal/netguard"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/webhook/sender"
	"github.com/voucherd/voucherd/internal/webhook/signing"
)

type received struct {
	header http.Header
	body   []byte
}

func receiver(t *testing.T, status int) (*httptest.Server, chan received, *atomic.Int32) {
	t.Helper()
	got := make(chan received, 16)
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		got <- received{r.Header.Clone(), b}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, got, &hits
}

func secret(t *testing.T) (string, []byte) {
	t.Helper()
	s, err := signing.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	k, err := signing.ParseSecret(s)
	if err != nil {
		t.Fatal(err)
	}
	return s, k
}

func TestSignaturesVerifyWithStandardWebhooks(t *testing.T) {
	srv, got, _ := receiver(t, http.StatusNoContent)
	s := sender.New(netguard.Options{AllowPrivate: true})
	current, currentKey := secret(t)
	previous, previousKey := secret(t)
	body := []byte(`{"id":"evt_1","type":"deposit.created","data":{"amount":"1.5"}}`)

	res := s.Deliver(context.Background(), webhook.Request{URL: srv.URL + "/hook?x=1", MessageID: "evt_1", Body: body, Secrets: [][]byte{currentKey, previousKey}})
	if !res.OK() || res.Status != http.StatusNoContent || res.Error != "" {
		t.Fatalf("result %+v", res)
	}
	r := <-got
	if string(r.body) != string(body) {
		t.Fatalf("body %q", r.body)
	}
	if r.header.Get("webhook-id") != "evt_1" || r.header.Get("Content-Type") != "application/json" || r.header.Get("User-Agent") != sender.UserAgent {
		t.Fatalf("headers %v", r.header)
	}
	ts, err := strconv.ParseInt(r.header.Get("webhook-timestamp"), 10, 64)
	if err != nil || time.Since(time.Unix(ts, 0)) > time.Minute {
		t.Fatalf("webhook-timestamp %q", r.header.Get("webhook-timestamp"))
	}
	if sigs := strings.Fields(r.header.Get("webhook-signature")); len(sigs) != 2 {
		t.Fatalf("want two signatures during a rotation, got %q", r.header.Get("webhook-signature"))
	}
	// A receiver holding either secret verifies with the reference library.
	for _, sec := range []string{current, previous} {
		wh, err := standardwebhooks.NewWebhook(sec)
		if err != nil {
			t.Fatal(err)
		}
		if err := wh.Verify(r.body, r.header); err != nil {
			t.Fatalf("verify: %v", err)
		}
		if err := wh.Verify([]byte(`{"id":"evt_1","type":"deposit.created","data":{"amount":"9.5"}}`), r.header); err == nil {
			t.Fatal("a tampered body verified")
		}
	}
	stranger, _ := secret(t)
	wh, _ := standardwebhooks.NewWebhook(stranger)
	if err := wh.Verify(r.body, r.header); err == nil {
		t.Fatal("an unrelated secret verified")
	}
}

func TestOnly2xxSucceeds(t *testing.T) {
	s := sender.New(netguard.Options{AllowPrivate: true})
	for _, code := range []int{200, 201, 202, 204, 299, 300, 304, 400, 404, 410, 429, 500, 503} {
		srv, _, _ := receiver(t, code)
		res := s.Deliver(context.Background(), webhook.Request{URL: srv.URL, MessageID: "evt_1", Body: []byte("{}")})
		if res.Status != code || res.OK() != (code >= 200 && code < 300) {
			t.Fatalf("%d: %+v", code, res)
		}
	}
}

func TestNoRedirects(t *testing.T) {
	target, _, targetHits := receiver(t, 200)
	redirect := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL, http.StatusTemporaryRedirect)
	}))
	defer redirect.Close()
	res := sender.New(netguard.Options{AllowPrivate: true}).Deliver(context.Background(), webhook.Request{URL: redirect.URL, MessageID: "evt_1", Body: []byte("{}")})
	if res.OK() || res.Status != http.StatusTemporaryRedirect || targetHits.Load() != 0 {
		t.Fatalf("result %+v, target hits %d", res, targetHits.Load())
	}
}

func TestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	s := sender.New(netguard.Options{AllowPrivate: true, Timeout: 200 * time.Millisecond})
	res := s.Deliver(context.Background(), webhook.Request{URL: srv.URL, MessageID: "evt_1", Body: []byte("{}")})
	if res.OK() || res.Error != sender.ReasonTimeout || res.Duration > 5*time.Second {
		t.Fatalf("result %+v", res)
	}
}

func TestLargeAnswerIsNotRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		chunk := []byte(strings.Repeat("x", 64<<10))
		for range 1024 { // 64 MiB, far past what is read
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	start := time.Now()
	res := sender.New(netguard.Options{AllowPrivate: true}).Deliver(context.Background(), webhook.Request{URL: srv.URL, MessageID: "evt_1", Body: []byte("{}")})
	if !res.OK() || time.Since(start) > 5*time.Second {
		t.Fatalf("result %+v after %v", res, time.Since(start))
	}
}

// The SSRF guard judges the address a name resolves to, at dial time: a
// name that looks harmless but resolves to loopback is refused, and the
// reason recorded names no address.
func TestGuardRefusesResolvedPrivateAddress(t *testing.T) {
	srv, _, hits := receiver(t, 200)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	s := sender.New(netguard.Options{})
	for _, u := range []string{
		"http://localhost:" + port + "/hook",
		srv.URL + "/hook",
		"http://[::ffff:127.0.0.1]:" + port + "/hook",
	} {
		res := s.Deliver(context.Background(), webhook.Request{URL: u, MessageID: "evt_1", Body: []byte("{}")})
		if res.OK() || res.Error != sender.ReasonForbiddenAddress || res.Status != 0 {
			t.Fatalf("%s: %+v", u, res)
		}
		if strings.Contains(res.Error, "127.0.0.1") || strings.Contains(res.Error, port) {
			t.Fatalf("reason %q names the address", res.Error)
		}
	}
	if hits.Load() != 0 {
		t.Fatal("the receiver was reached")
	}
}

func TestFailureReasons(t *testing.T) {
	// A port nothing listens on.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	// The timeout only bounds the DNS case; a TLS handshake with -race on a
	// loaded machine has been seen to take over 2 s.
	s := sender.New(netguard.Options{AllowPrivate: true, Timeout: 10 * time.Second})
	res := s.Deliver(context.Background(), webhook.Request{URL: "http://" + addr + "/", MessageID: "evt_1", Body: []byte("{}")})
	if res.Error != sender.ReasonRefused {
		t.Fatalf("refused: %+v", res)
	}
	res = s.Deliver(context.Background(), webhook.Request{URL: "http://no-such-host.invalid/", MessageID: "evt_1", Body: []byte("{}")})
	if res.Error != sender.ReasonDNS && res.Error != sender.ReasonTimeout {
		t.Fatalf("dns: %+v", res)
	}
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer tlsSrv.Close()
	res = s.Deliver(context.Background(), webhook.Request{URL: tlsSrv.URL, MessageID: "evt_1", Body: []byte("{}")})
	if res.Error != sender.ReasonTLS {
		t.Fatalf("untrusted certificate: %+v", res)
	}
}
