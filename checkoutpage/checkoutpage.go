// Package checkoutpage is the hosted checkout door: the page a merchant
// sends its customer to (GET /checkout/<token>), its embedded assets, and
// its live state as Server-Sent Events. The checkout token in the path is
// the only credential; every rule (what the token shows, who may pay)
// lives in internal/widget and internal/voucher.
//
// The page is server-rendered with html/template and one small script; all
// of it is embedded in the binary and served from this origin, and a strict
// Content-Security-Policy (no inline script or style, nothing from another
// host) holds it to that. The QR code is drawn on the server
// (github.com/skip2/go-qrcode) and inlined as a PNG data URI.
package checkoutpage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"time"

	qrcode "github.com/skip2/go-qrcode"

	"github.com/voucherd/voucherd/internal/apperr"
	"github.com/voucherd/voucherd/internal/httpx"
	"github.com/voucherd/voucherd/internal/pubsub"
	"github.com/voucherd/voucherd/internal/view"
	"github.com/voucherd/voucherd/internal/widget"
)

//go:embed assets page.html
var files embed.FS

var page = template.Must(template.ParseFS(files, "page.html"))

// CSP is the page's Content-Security-Policy: only this origin's script,
// style and live events, images from this origin or data: (the QR code),
// no frames, no plugins, no form posts elsewhere.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// Options are the door's collaborators.
type Options struct {
	Widgets *widget.Service
	Hub     *pubsub.Hub
	// Done ends every open event stream (the service is shutting down).
	Done context.Context
	Log  *slog.Logger
	// Heartbeat is the idle interval after which an event stream sends a
	// comment, so proxies keep it open (25 s when zero).
	Heartbeat time.Duration
}

type handler struct {
	Options
	assets http.Handler
	etags  map[string]string
}

// Register mounts the page, its events and its assets on mux.
func Register(mux *http.ServeMux, o Options) {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Done == nil {
		o.Done = context.Background()
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 25 * time.Second
	}
	sub, _ := fs.Sub(files, "assets")
	h := &handler{Options: o, assets: http.FileServerFS(sub), etags: map[string]string{}}
	_ = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := fs.ReadFile(sub, p)
			sum := sha256.Sum256(b)
			h.etags[p] = `"` + hex.EncodeToString(sum[:8]) + `"`
		}
		return nil
	})
	mux.HandleFunc("GET /checkout-assets/{name}", h.asset)
	mux.HandleFunc("GET /checkout/{token}", h.page)
	mux.HandleFunc("GET /checkout/{token}/events", h.events)
	mux.HandleFunc("GET /checkout/{token}/qr.png", h.qr)
}

func secureHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", CSP)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("X-Frame-Options", "DENY")
}

func (h *handler) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	etag, ok := h.etags[name]
	if !ok {
		httpx.NotFound(w, r)
		return
	}
	secureHeaders(w)
	w.Header().Set("ETag", etag)
	w.Header().Set("Cache-Control", "public, max-age=3600")
	r2 := r.Clone(r.Context())
	r2.URL.Path = "/" + path.Clean(name)
	h.assets.ServeHTTP(w, r2)
}

// pageData is what the template shows: the checkout's public view
// (internal/view) and the page's own parts.
type pageData struct {
	*view.PublicCheckout
	Token      string
	QR         template.URL
	PaymentURI template.URL
	Message    string
	Messages   map[string]string
}

// Messages say plainly, per page status, what the customer should do.
func Messages(business string) map[string]string {
	return map[string]string{
		widget.StatusAwaitingPayment: "Send exactly this amount on this network to the address below, or scan the code with your wallet app. Then keep this page open.",
		widget.StatusPending:         "Payment received. Waiting for the network to confirm it; this usually takes a minute. You can keep this page open.",
		widget.StatusConfirmed:       "Paid. Thank you! You can close this page.",
		widget.StatusUnderpaid:       "Less than the amount due arrived. Do not pay again here: contact " + business + " with your transaction hash to settle the difference.",
		widget.StatusOverpaid:        "More than the amount due arrived. Your payment is complete; contact " + business + " with your transaction hash about the difference.",
		widget.StatusFailed:          "The payment failed or did not pay this checkout. If your transaction failed, no funds moved. Contact " + business + " or start a new checkout; do not send funds to this address for it again.",
		widget.StatusExpired:         "This checkout expired before a payment arrived. Do not send funds for it: go back to " + business + " and start a new checkout.",
	}
}

func (h *handler) page(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	v, name, err := h.Widgets.CheckoutVoucher(r.Context(), token)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	pc := view.OfPublicCheckout(h.Widgets.PublicOf(v, name))
	png, err := QR(pc.PaymentURI)
	if err != nil {
		h.fail(w, r, apperr.InternalError(err))
		return
	}
	msgs := Messages(name)
	vw := pageData{
		PublicCheckout: pc, Token: token,
		QR:         template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(png)),
		PaymentURI: template.URL(pc.PaymentURI),
		Message:    msgs[pc.Status], Messages: msgs,
	}
	var buf bytes.Buffer
	if err := page.Execute(&buf, vw); err != nil {
		h.fail(w, r, apperr.InternalError(err))
		return
	}
	secureHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(buf.Bytes())
}

// QR is the PNG of a payment URI that the page shows (256 px, medium
// error correction).
func QR(paymentURI string) ([]byte, error) { return qrcode.Encode(paymentURI, qrcode.Medium, 256) }

// qr answers the checkout's current QR code: after a partial payment the
// page swaps its code for this one, which asks for what remains (the
// page's first code is inlined, so a first visit costs no request).
func (h *handler) qr(w http.ResponseWriter, r *http.Request) {
	v, name, err := h.Widgets.CheckoutVoucher(r.Context(), r.PathValue("token"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	png, err := QR(h.Widgets.PublicOf(v, name).PaymentURI)
	if err != nil {
		h.fail(w, r, apperr.InternalError(err))
		return
	}
	secureHeaders(w)
	w.Header().Set("Content-Type", "image/png")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(png)
}

// fail answers a page request: a plain 404 page for an unknown token,
// else the usual error.
func (h *handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	if apperr.HasCode(err, apperr.NotFound) {
		secureHeaders(w)
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("<!doctype html><html lang=\"en\"><meta charset=\"utf-8\"><title>Checkout not found</title>" +
			"<h1>Checkout not found</h1><p>This payment link is not valid. Go back to the shop and start the payment again.</p></html>"))
		return
	}
	httpx.WriteError(w, r, h.Log, err)
}

// events streams the checkout's public view: now, then on every change of
// its voucher (settlement included), pushed by the hub. The handler's own
// goroutine waits; the subscription holds none. A comment every Heartbeat
// keeps idle proxies from closing the stream; EventSource reconnects after
// 2 s when it does end.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	token := r.PathValue("token")
	// The first read only refuses an unknown token before the stream opens.
	v, _, err := h.Widgets.CheckoutVoucher(r.Context(), token)
	if err != nil {
		httpx.WriteError(w, r, h.Log, err)
		return
	}
	sub := h.Hub.Subscribe(pubsub.ByVoucher, v.ID)
	defer sub.Close()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	stop := context.AfterFunc(h.Done, cancel)
	defer stop()

	secureHeaders(w)
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no")
	rc := http.NewResponseController(w)
	// Re-read after subscribing, so a change between the first read and
	// the subscription is not missed.
	var name string
	if v, name, err = h.Widgets.CheckoutVoucher(ctx, token); err != nil {
		httpx.WriteError(w, r, h.Log, err)
		return
	}
	last := -1
	send := func(st *widget.PublicState) bool {
		b, err := json.Marshal(view.OfPublicCheckout(st))
		if err != nil {
			return false
		}
		var buf bytes.Buffer
		buf.WriteString("event: checkout\ndata: ")
		buf.Write(b)
		buf.WriteString("\n\n")
		_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	_, _ = w.Write([]byte("retry: 2000\n\n"))
	last = v.Version
	if !send(h.Widgets.PublicOf(v, name)) {
		return
	}
	for {
		wctx, wcancel := context.WithTimeout(ctx, h.Heartbeat)
		ev, err := sub.Next(wctx)
		wcancel()
		switch {
		case err == nil:
			if ev.Voucher.Version <= last && !ev.Resync {
				continue
			}
			last = ev.Voucher.Version
			if !send(h.Widgets.PublicOf(ev.Voucher, name)) {
				return
			}
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			_ = rc.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := w.Write([]byte(": keep-alive\n\n")); err != nil || rc.Flush() != nil {
				return
			}
		case errors.Is(err, pubsub.ErrSlow):
			// Fell behind: start over with a fresh subscription (the
			// client reconnects and reads the current state).
			return
		default:
			return
		}
	}
}
