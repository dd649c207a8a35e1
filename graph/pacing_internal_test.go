package graph

import (
	"fmt"
	"testing"
	"time"
)

// An address waits factor times what its refused requests took, added up,
// never more than maxWait from now; other addresses never wait; entries
// for addresses no longer owing are dropped.
func TestRefusalPacerArithmetic(t *testing.T) {
	p := newRefusalPacer(0.1, 250*time.Millisecond, nil)
	t0 := time.Unix(1_000_000, 0)
	ms := time.Millisecond
	if w := p.wait("a", t0); w != 0 {
		t.Fatalf("a fresh address waits %v", w)
	}
	p.charge("a", t0, t0.Add(2*ms)) // 2 ms refused: 18 ms owed
	if w := p.wait("a", t0.Add(2*ms)); w != 18*ms {
		t.Fatalf("after a 2 ms refusal: wait %v, want 18ms", w)
	}
	if w := p.wait("b", t0.Add(2*ms)); w != 0 {
		t.Fatalf("another address waits %v", w)
	}
	// A second refusal at the same moment adds to what is owed.
	p.charge("a", t0, t0.Add(2*ms))
	if w := p.wait("a", t0.Add(2*ms)); w != 36*ms {
		t.Fatalf("after two: wait %v, want 36ms", w)
	}
	// Never more than maxWait from now.
	for range 100 {
		p.charge("a", t0, t0.Add(2*ms))
	}
	if w := p.wait("a", t0.Add(2*ms)); w != 250*ms {
		t.Fatalf("capped wait %v, want 250ms", w)
	}
	// Once due, nothing is owed and the entry goes.
	if w := p.wait("a", t0.Add(time.Second)); w != 0 {
		t.Fatalf("after its due time: wait %v", w)
	}
	if _, ok := p.due["a"]; ok {
		t.Fatal("entry kept after it was due")
	}
	// The map holds only addresses owing a wait.
	now := t0.Add(time.Hour)
	for i := range 5000 {
		p.charge(fmt.Sprint("x", i), now, now.Add(ms))
		now = now.Add(time.Second) // each earlier one is due by now
	}
	if n := len(p.due); n > 1024 {
		t.Fatalf("%d entries for addresses no longer owing", n)
	}
}
