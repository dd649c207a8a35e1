// Package sender is the webhook dispatcher's HTTP transport: one signed
// POST per attempt, dialled through the SSRF guard (internal/netguard) with
// the spec's 10-second limit, no redirects, and a capped read of the answer.
//
// What it reports about a failure is a fixed, client-safe reason: the
// delivery log is shown to the business, and net/http's error texts name
// resolved addresses inside our network.
package sender

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/voucherd/voucherd/internal/netguard"
	"github.com/voucherd/voucherd/internal/webhook"
	"github.com/voucherd/voucherd/internal/webhook/signing"
)

// UserAgent identifies our deliveries to receivers.
const UserAgent = "voucherd-webhooks/1"

// bodyLimit is how much of a receiver's answer we read: it is not stored,
// reading a little only lets the connection be reused.
const bodyLimit = 4 << 10

// Fixed failure reasons.
const (
	ReasonForbiddenAddress = "destination address is not public"
	ReasonTimeout          = "timeout: no response within 10 s"
	ReasonDNS              = "could not resolve the endpoint host"
	ReasonRefused          = "connection refused"
	ReasonTLS              = "TLS handshake failed"
	ReasonConnection       = "connection failed"
)

// Sender implements webhook.Transport.
type Sender struct {
	client *http.Client
	now    func() time.Time
}

// New returns a Sender; opts.Timeout defaults to webhook.AttemptTimeout.
func New(opts netguard.Options) *Sender {
	if opts.Timeout <= 0 {
		opts.Timeout = webhook.AttemptTimeout
	}
	return &Sender{client: netguard.NewClient(opts), now: time.Now}
}

// Deliver makes one signed POST. It is signed at send time, so a retry
// carries a fresh webhook-timestamp and the same webhook-id.
func (s *Sender) Deliver(ctx context.Context, req webhook.Request) webhook.Result {
	start := s.now()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, req.URL, bytes.NewReader(req.Body))
	if err != nil {
		return webhook.Result{Error: ReasonConnection, Duration: time.Since(start)}
	}
	hreq.Header = signing.Headers(req.MessageID, start, req.Body, req.Secrets...)
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("User-Agent", UserAgent)
	resp, err := s.client.Do(hreq)
	if err != nil {
		return webhook.Result{Error: Reason(err), Duration: time.Since(start)}
	}
	// Only the status matters; a body that is slow or broken after a 2xx
	// does not undo a delivery the receiver has acknowledged.
	_, _ = netguard.ReadLimited(resp, bodyLimit)
	return webhook.Result{Status: resp.StatusCode, Duration: time.Since(start)}
}

// Reason maps a request error to its fixed reason.
func Reason(err error) string {
	var (
		dnsErr   *net.DNSError
		certErr  *tls.CertificateVerificationError
		hostErr  x509.HostnameError
		authErr  x509.UnknownAuthorityError
		recErr   tls.RecordHeaderError
		alertErr tls.AlertError
		netErr   net.Error
	)
	switch {
	case errors.Is(err, netguard.ErrForbiddenAddress):
		return ReasonForbiddenAddress
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return ReasonTimeout
	case errors.As(err, &dnsErr):
		return ReasonDNS
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonRefused
	case errors.As(err, &certErr), errors.As(err, &hostErr), errors.As(err, &authErr),
		errors.As(err, &recErr), errors.As(err, &alertErr):
		return ReasonTLS
	default:
		return ReasonConnection
	}
}
