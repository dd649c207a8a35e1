package harness

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The lean client reads what net/http servers send (fixed-length and
// chunked bodies, any status) over one kept-alive connection.
func TestLeanConn(t *testing.T) {
	big := strings.Repeat("x", 10_000)
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			if r.Header.Get("Authorization") != "Bearer tok" {
				http.Error(w, "no token", http.StatusUnauthorized)
				return
			}
			io.WriteString(w, "hello")
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.Write(b)
		case "/big":
			for i := 0; i < len(big); i += 1000 {
				io.WriteString(w, big[i:i+1000])
				w.(http.Flusher).Flush() // chunked
			}
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	l := newLeanConn(strings.TrimPrefix(srv.URL, "http://"))
	defer l.Close()
	ctx := context.Background()
	for range 3 {
		for _, tc := range []struct {
			method, path, token, body string
			status                    int
			want                      string
		}{
			{"GET", "/small", "tok", "", 200, "hello"},
			{"GET", "/small", "", "", 401, "no token\n"},
			{"POST", "/echo", "", `{"a":1}`, 200, `{"a":1}`},
			{"GET", "/big", "", "", 200, big},
			{"GET", "/missing", "", "", 404, "404 page not found\n"},
		} {
			var body []byte
			if tc.body != "" {
				body = []byte(tc.body)
			}
			status, b, err := l.Do(ctx, tc.method, tc.path, tc.token, body)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.method, tc.path, err)
			}
			if status != tc.status || string(b) != tc.want {
				t.Fatalf("%s %s: %d %.50q, want %d %.50q", tc.method, tc.path, status, b, tc.status, tc.want)
			}
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("the server saw %d connections, want 1 kept alive", n)
	}
}

func TestCommitTiming(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{`commit;desc="1764235800123456789"`, 1764235800123456789},
		{`db;dur=1.2, commit;desc="42"`, 42},
		{`commit;dur=3`, 0},
		{`other;desc="5"`, 0},
		{`commit;desc="x"`, 0},
	} {
		got := commitTiming([]byte(c.in))
		if (c.want == 0) != got.IsZero() || (c.want != 0 && got.UnixNano() != c.want) {
			t.Errorf("commitTiming(%q) = %v, want %d", c.in, got, c.want)
		}
		in := []byte(c.in)
		if c.want == 0 {
			continue // strconv's error is the one allocation, on a bad stamp only
		}
		if n := testing.AllocsPerRun(100, func() { _ = commitTiming(in) }); n != 0 {
			t.Errorf("commitTiming(%q) allocates %.1f times", c.in, n)
		}
	}
}
