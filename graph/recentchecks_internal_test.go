package graph

import (
	"testing"
	"time"
)

func TestRecentChecksShareAndExpire(t *testing.T) {
	c := &recentChecks{}
	const within = 40 * time.Millisecond
	if c.fresh("a", within) {
		t.Fatal("nothing checked yet")
	}
	c.mark("a", within)
	if !c.fresh("a", within) || c.fresh("b", within) {
		t.Fatal("a check stands in for its own key only")
	}
	time.Sleep(within + 10*time.Millisecond)
	if c.fresh("a", within) {
		t.Fatal("a check older than the window must not stand in")
	}
	c.mark("b", within) // prunes a
	c.mu.Lock()
	_, kept := c.at["a"]
	c.mu.Unlock()
	if kept {
		t.Fatal("stale entries are pruned")
	}
}
