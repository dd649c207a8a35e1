package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// leanConn is a minimal keep-alive HTTP/1.1 client connection for the
// loaded phases: the worker that owns it writes a request and reads its
// answer on its own goroutine, as wrk does, and as pgbench, the reference
// those phases are compared with, does with its database connection.
// net/http's client hands every request between three goroutines (the
// caller, the connection's writer and its reader); on a 2-vCPU machine
// those handoffs are scheduling delays and CPU the reference's client
// does not spend, and they counted against the service.
//
// It understands what the service and the floor send: a status line,
// headers, and a Content-Length or chunked body. Anything else is an
// error, so nothing is measured that was not fully read.
type leanConn struct {
	addr string
	c    net.Conn
	br   *bufio.Reader
	wbuf []byte
	body []byte
	// committed is the last answer's commit instant, from its
	// Server-Timing `commit;desc="<Unix ns>"` (zero when it had none): the
	// service stamps transition answers with it (voucher.CommitStamp).
	committed time.Time
}

func newLeanConn(addr string) *leanConn { return &leanConn{addr: addr} }

// Do sends one request (body may be nil) and returns the status and the
// body, which is valid until the next Do.
func (l *leanConn) Do(ctx context.Context, method, path, token string, body []byte) (int, []byte, error) {
	if l.c == nil {
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", l.addr)
		if err != nil {
			return 0, nil, err
		}
		l.c, l.br = c, bufio.NewReaderSize(c, 16<<10)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = l.c.SetDeadline(dl)
	} else {
		_ = l.c.SetDeadline(time.Now().Add(60 * time.Second))
	}
	w := append(l.wbuf[:0], method...)
	w = append(w, ' ')
	w = append(w, path...)
	w = append(w, " HTTP/1.1\r\nHost: "...)
	w = append(w, l.addr...)
	w = append(w, "\r\n"...)
	if token != "" {
		w = append(w, "Authorization: Bearer "...)
		w = append(w, token...)
		w = append(w, "\r\n"...)
	}
	if body != nil {
		w = append(w, "Content-Type: application/json\r\nContent-Length: "...)
		w = strconv.AppendInt(w, int64(len(body)), 10)
		w = append(w, "\r\n"...)
	}
	w = append(w, "\r\n"...)
	w = append(w, body...)
	l.wbuf = w
	if _, err := l.c.Write(w); err != nil {
		l.Close()
		return 0, nil, err
	}
	status, b, err := l.read()
	if err != nil {
		l.Close()
	}
	return status, b, err
}

func (l *leanConn) read() (int, []byte, error) {
	line, err := l.br.ReadSlice('\n')
	if err != nil {
		return 0, nil, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, nil, fmt.Errorf("lean client: bad status line %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, nil, fmt.Errorf("lean client: bad status line %q", line)
	}
	n, closing, chunked := -1, false, false
	l.committed = time.Time{}
	for {
		h, err := l.br.ReadSlice('\n')
		if err != nil {
			return 0, nil, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		k, v, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, nil, fmt.Errorf("lean client: bad header %q", h)
		}
		v = bytes.TrimSpace(v)
		switch {
		case bytes.EqualFold(k, []byte("Content-Length")):
			if n, err = strconv.Atoi(string(v)); err != nil || n < 0 {
				return 0, nil, fmt.Errorf("lean client: bad Content-Length %q", v)
			}
		case bytes.EqualFold(k, []byte("Transfer-Encoding")):
			if !bytes.EqualFold(v, []byte("chunked")) {
				return 0, nil, fmt.Errorf("lean client: unsupported Transfer-Encoding %q", v)
			}
			chunked = true
		case bytes.EqualFold(k, []byte("Connection")) && bytes.EqualFold(v, []byte("close")):
			closing = true
		case bytes.EqualFold(k, []byte("Server-Timing")):
			l.committed = commitTiming(v)
		}
	}
	var b []byte
	switch {
	case chunked:
		if b, err = l.chunks(); err != nil {
			return 0, nil, err
		}
	case n < 0:
		return 0, nil, errors.New("lean client: response without Content-Length")
	default:
		if cap(l.body) < n {
			l.body = make([]byte, n)
		}
		b = l.body[:n]
		if _, err := io.ReadFull(l.br, b); err != nil {
			return 0, nil, err
		}
	}
	if closing {
		l.Close()
	}
	return status, b, nil
}

// commitTiming reads `commit;desc="<Unix ns>"` from a Server-Timing
// value (zero time when it is not there), without allocating: it runs for
// every answer of the 1,000/s phases, in the process whose collector would
// otherwise be part of what they measure.
func commitTiming(v []byte) time.Time {
	for len(v) > 0 {
		var m []byte
		if i := bytes.IndexByte(v, ','); i >= 0 {
			m, v = v[:i], v[i+1:]
		} else {
			m, v = v, nil
		}
		name, params, _ := bytes.Cut(bytes.TrimSpace(m), []byte(";"))
		if string(name) != "commit" {
			continue
		}
		for len(params) > 0 {
			var p []byte
			if i := bytes.IndexByte(params, ';'); i >= 0 {
				p, params = params[:i], params[i+1:]
			} else {
				p, params = params, nil
			}
			if k, val, ok := bytes.Cut(bytes.TrimSpace(p), []byte("=")); ok && string(k) == "desc" {
				if ns, err := strconv.ParseInt(string(bytes.Trim(val, `"`)), 10, 64); err == nil {
					return time.Unix(0, ns)
				}
			}
		}
	}
	return time.Time{}
}

// chunks reads a chunked body (without trailers, which nothing sends).
func (l *leanConn) chunks() ([]byte, error) {
	b := l.body[:0]
	for {
		line, err := l.br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseUint(string(size), 16, 31)
		if err != nil {
			return nil, fmt.Errorf("lean client: bad chunk size %q", line)
		}
		if n == 0 {
			if _, err := l.br.ReadSlice('\n'); err != nil { // the final CRLF
				return nil, err
			}
			l.body = b
			return b, nil
		}
		start := len(b)
		b = append(b, make([]byte, n)...)
		if _, err := io.ReadFull(l.br, b[start:]); err != nil {
			return nil, err
		}
		if _, err := l.br.Discard(2); err != nil { // CRLF after the data
			return nil, err
		}
	}
}

// Close drops the connection; the next Do dials again.
func (l *leanConn) Close() {
	if l.c != nil {
		_ = l.c.Close()
		l.c, l.br = nil, nil
	}
}

// leanConns is one leanConn per closed-loop worker.
type leanConns []*leanConn

func newLeanConns(addr string, n int) leanConns {
	out := make(leanConns, n)
	for i := range out {
		out[i] = newLeanConn(addr)
	}
	return out
}

func (ls leanConns) Close() {
	for _, l := range ls {
		l.Close()
	}
}

// ok runs one request on worker w's connection and returns the body of a
// 200 (a *StatusError otherwise).
func (ls leanConns) ok(ctx context.Context, w int, method, path, token string, body []byte) ([]byte, error) {
	status, b, err := ls[w].Do(ctx, method, path, token, body)
	if err != nil {
		return nil, err
	}
	if status != 200 {
		if len(b) > 300 {
			b = b[:300]
		}
		return nil, &StatusError{Method: method, Path: path, Status: status, Body: string(b)}
	}
	return b, nil
}

// leanPool lends leanConns to an open loop's requests, which are not tied
// to workers: as many connections as requests were ever in flight at once.
type leanPool struct {
	addr string
	mu   sync.Mutex
	free []*leanConn
	all  []*leanConn
}

func newLeanPool(addr string) *leanPool { return &leanPool{addr: addr} }

// ok is leanConns.ok on a borrowed connection.
func (p *leanPool) ok(ctx context.Context, method, path, token string, body []byte) ([]byte, error) {
	b, _, err := p.okCommitted(ctx, method, path, token, body)
	return b, err
}

// okCommitted is ok, also returning the answer's commit instant (zero when
// the answer did not carry one).
func (p *leanPool) okCommitted(ctx context.Context, method, path, token string, body []byte) ([]byte, time.Time, error) {
	p.mu.Lock()
	var l *leanConn
	if n := len(p.free); n > 0 {
		l, p.free = p.free[n-1], p.free[:n-1]
	} else {
		l = newLeanConn(p.addr)
		p.all = append(p.all, l)
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.free = append(p.free, l)
		p.mu.Unlock()
	}()
	b, err := leanConns{l}.ok(ctx, 0, method, path, token, body)
	return b, l.committed, err
}

// Close drops every connection.
func (p *leanPool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, l := range p.all {
		l.Close()
	}
}
