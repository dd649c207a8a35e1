// Package graphiql serves the GraphiQL page (development only) from assets
// embedded in the binary: the page loads nothing from any other host. The
// assets (GraphiQL's UMD build and React's) are vendored by
// scripts/vendor-graphiql.sh and stored gzip-compressed; a browser that
// accepts gzip gets those bytes as they are, any other client the
// decompressed file. A Content-Security-Policy keeps the page to its own
// origin.
package graphiql

import (
	"bytes"
	"compress/gzip"
	"embed"
	"io"
	"net/http"
	"path"
	"strings"
)

//go:embed index.html page.js page.css assets/*.gz
var files embed.FS

// csp allows only this origin (and data: URLs, which GraphiQL's CSS uses
// for its fonts and icons); inline styles are GraphiQL's own (React sets
// style attributes).
const csp = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; " +
	"font-src 'self' data:; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// Handler serves GET /graphiql (the page) and GET /graphiql/assets/<name>.
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /graphiql", func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, "index.html", "text/html; charset=utf-8", false)
	})
	mux.HandleFunc("GET /graphiql/assets/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		switch {
		case name == "page.js":
			serve(w, r, "page.js", "text/javascript; charset=utf-8", false)
		case name == "page.css":
			serve(w, r, "page.css", "text/css; charset=utf-8", false)
		case strings.HasSuffix(name, ".js"):
			serve(w, r, "assets/"+name+".gz", "text/javascript; charset=utf-8", true)
		case strings.HasSuffix(name, ".css"):
			serve(w, r, "assets/"+name+".gz", "text/css; charset=utf-8", true)
		default:
			http.NotFound(w, r)
		}
	})
	return mux
}

func serve(w http.ResponseWriter, r *http.Request, name, contentType string, gzipped bool) {
	b, err := files.ReadFile(path.Clean(name))
	if err != nil {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Security-Policy", csp)
	h.Set("Cache-Control", "no-cache")
	if !gzipped {
		_, _ = w.Write(b)
		return
	}
	h.Add("Vary", "Accept-Encoding")
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		_, _ = w.Write(b)
		return
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		http.Error(w, "corrupt embedded asset", http.StatusInternalServerError)
		return
	}
	_, _ = io.Copy(w, zr)
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
