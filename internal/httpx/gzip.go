package httpx

import (
	"net/http"
	"strings"

	"github.com/klauspost/compress/gzhttp"
)

// GzipMinSize is the smallest answer worth compressing: below 1 KiB the
// gzip framing and the CPU cost more than the bytes saved.
const GzipMinSize = 1024

// Gzip compresses answers of GzipMinSize bytes and more for clients that
// accept gzip (github.com/klauspost/compress/gzhttp: it buffers up to the
// threshold before deciding, sets Vary: Accept-Encoding, and leaves alone
// answers that already carry a Content-Encoding, such as /metrics'
// own). Websocket upgrades bypass it: the connection is hijacked and
// carries no HTTP body. So do event streams.
func Gzip(h http.Handler) http.Handler {
	wrap, err := gzhttp.NewWrapper(gzhttp.MinSize(GzipMinSize))
	if err != nil {
		panic(err) // only for invalid options, which are constants here
	}
	gz := wrap(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// An event stream (the checkout page's live state) must reach the
		// browser event by event; gzhttp would hold its small writes back
		// until the size threshold. EventSource always asks for it by name.
		if r.Header.Get("Upgrade") != "" || strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			h.ServeHTTP(w, r)
			return
		}
		gz.ServeHTTP(w, r)
	})
}
