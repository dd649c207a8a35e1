package httpx

import (
	"io"
	"net/http"
	"strings"

	"github.com/klauspost/compress/gzhttp"
	"github.com/klauspost/compress/gzhttp/writer"
	"github.com/klauspost/compress/gzip"
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
	wrap, err := gzhttp.NewWrapper(gzhttp.MinSize(GzipMinSize), gzhttp.Implementation(keptGzip.factory()))
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

// keptGzip holds the compressors Gzip has finished with, for the next
// answers. gzhttp's own pool is a sync.Pool, which every collection
// empties: an answer compressed now and then (a /metrics scrape every
// few seconds, with collections in between) built a new compressor each
// time, about a megabyte of garbage. Up to keptWriters stay here across
// collections; beyond them a finished compressor is dropped.
var keptGzip = gzipWriters{free: make(chan *keptWriter, keptWriters)}

const keptWriters = 4

type gzipWriters struct{ free chan *keptWriter }

func (g gzipWriters) factory() writer.GzipWriterFactory {
	return writer.GzipWriterFactory{
		Levels: func() (int, int) { return gzip.StatelessCompression, gzip.BestCompression },
		New:    g.get,
	}
}

// get returns a compressor writing to w: a kept one of that level when
// there is one (gzhttp asks for one constant level), a new one otherwise.
func (g gzipWriters) get(w io.Writer, level int) writer.GzipWriter {
	select {
	case k := <-g.free:
		if k.level == level {
			k.Reset(w)
			return k
		}
	default:
	}
	zw, err := gzip.NewWriterLevel(w, level)
	if err != nil { // a level outside Levels, which gzhttp never asks for
		zw, level = gzip.NewWriter(w), gzip.DefaultCompression
	}
	return &keptWriter{Writer: zw, level: level, g: g}
}

type keptWriter struct {
	*gzip.Writer
	level int
	g     gzipWriters
}

// Close ends the stream and keeps the compressor if there is room.
func (k *keptWriter) Close() error {
	err := k.Writer.Close()
	k.Reset(io.Discard) // let go of the answer's writer
	select {
	case k.g.free <- k:
	default:
	}
	return err
}

// SetHeader sets the gzip header's fields (gzhttp's GzipWriterExt).
func (k *keptWriter) SetHeader(h writer.Header) {
	k.Name, k.Extra, k.Comment, k.ModTime, k.OS = h.Name, h.Extra, h.Comment, h.ModTime, h.OS
}
