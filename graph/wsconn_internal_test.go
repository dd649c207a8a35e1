package graph

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

// memConn records what is written to it.
type memConn struct {
	net.Conn
	mu     sync.Mutex
	out    bytes.Buffer
	closed bool
}

func (c *memConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	return c.out.Write(p)
}
func (c *memConn) Close() error                     { c.mu.Lock(); c.closed = true; c.mu.Unlock(); return nil }
func (c *memConn) SetWriteDeadline(time.Time) error { return nil }

func masked(opcode byte, payload []byte) []byte {
	b := []byte{0x80 | opcode}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	b = append(b, 1, 2, 3, 4) // masking key (payload left as is: only lengths matter)
	return append(b, payload...)
}

// The tracker finds every frame boundary however the stream is cut.
func TestFrameTrackerBoundaries(t *testing.T) {
	sizes := []int{0, 1, 125, 126, 127, 300, 65535, 65536, 70000}
	for _, mask := range []bool{false, true} {
		var stream []byte
		var ends []int
		for _, n := range sizes {
			p := bytes.Repeat([]byte{'x'}, n)
			if mask {
				stream = append(stream, masked(0x1, p)...)
			} else {
				stream = append(stream, frame(0x1, p)...)
			}
			ends = append(ends, len(stream))
		}
		for trial := 0; trial < 50; trial++ {
			var f frameTracker
			var lengths []uint64
			var boundaries []int
			pos := 0
			for pos < len(stream) {
				n := 1 + rand.IntN(300)
				if trial%5 == 0 {
					n = 1
				}
				n = min(n, len(stream)-pos)
				if err := f.feed(stream[pos:pos+n], func(_ byte, l uint64) error { lengths = append(lengths, l); return nil }); err != nil {
					t.Fatal(err)
				}
				pos += n
				if f.atBoundary() {
					boundaries = append(boundaries, pos)
				}
			}
			if len(lengths) != len(sizes) {
				t.Fatalf("mask=%v: %d headers, want %d", mask, len(lengths), len(sizes))
			}
			for i, n := range sizes {
				if lengths[i] != uint64(n) {
					t.Fatalf("frame %d length %d, want %d", i, lengths[i], n)
				}
			}
			// Every boundary seen is a real frame end.
			for _, b := range boundaries {
				found := false
				for _, e := range ends {
					found = found || e == b
				}
				if !found {
					t.Fatalf("mask=%v: boundary at %d is inside a frame", mask, b)
				}
			}
		}
	}
}

// A close requested while a frame is half written goes out right after
// that frame, never inside it; nothing is written after it.
func TestCloseWaitsForFrameBoundary(t *testing.T) {
	conn := &memConn{}
	g := &wsGuard{Conn: conn}
	handshake := []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")
	if _, err := g.Write(handshake); err != nil {
		t.Fatal(err)
	}
	data := frame(0x1, bytes.Repeat([]byte("y"), 1000))
	if _, err := g.Write(data[:10]); err != nil {
		t.Fatal(err)
	}
	g.closeWith(CloseForbidden, "Forbidden")
	conn.mu.Lock()
	mid := conn.out.Len()
	conn.mu.Unlock()
	if mid != len(handshake)+10 {
		t.Fatalf("wrote %d bytes inside a frame", mid-len(handshake)-10)
	}
	if _, err := g.Write(data[10:]); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Write(frame(0x1, []byte("late"))); err == nil {
		t.Fatal("a frame was written after the close")
	}
	conn.mu.Lock()
	out := bytes.Clone(conn.out.Bytes()[len(handshake):])
	closed := conn.closed
	conn.mu.Unlock()
	var f frameTracker
	var ops []byte
	if err := f.feed(out, func(op byte, _ uint64) error { ops = append(ops, op); return nil }); err != nil {
		t.Fatal(err)
	}
	if !f.atBoundary() || len(ops) != 2 || ops[0] != 0x1 || ops[1] != 0x8 {
		t.Fatalf("frames %v, boundary %v", ops, f.atBoundary())
	}
	code := binary.BigEndian.Uint16(out[len(data)+2:])
	if code != CloseForbidden || !closed {
		t.Fatalf("close code %d, closed %v", code, closed)
	}
}
