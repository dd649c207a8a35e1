package ids

import (
	"sort"
	"strings"
	"testing"
	"time"
)

func TestNewIsPrefixedUniqueAndOrdered(t *testing.T) {
	seen := map[string]bool{}
	var list []string
	for i := 0; i < 2000; i++ {
		id := New(Voucher)
		if !HasPrefix(id, Voucher) {
			t.Fatalf("bad id %q", id)
		}
		if seen[id] {
			t.Fatalf("duplicate %q", id)
		}
		seen[id] = true
		list = append(list, id)
		if i%500 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	first, last := list[0], list[len(list)-1]
	if !(first < last) {
		t.Fatalf("ids not time ordered: %s then %s", first, last)
	}
	if !sort.StringsAreSorted([]string{list[0], list[600], list[1200], list[1999]}) {
		t.Fatal("ids across milliseconds are not ordered")
	}
}

func TestTable(t *testing.T) {
	if tb, err := Table(New(Business)); err != nil || tb != "businesses" {
		t.Fatalf("Table = %q, %v", tb, err)
	}
	for _, bad := range []string{"", "vch_", "vch_short", "xyz_01234567890123456789012345", New(Payment)} {
		if _, err := Table(bad); err == nil {
			t.Fatalf("Table(%q) accepted", bad)
		}
	}
}

func TestTime(t *testing.T) {
	before := time.Now().Truncate(time.Millisecond)
	id := New(Delivery)
	after := time.Now()
	got, ok := Time(id)
	if !ok || got.Before(before) || got.After(after) {
		t.Fatalf("Time(%s) = %v %v, want between %v and %v", id, got, ok, before, after)
	}
	for _, bad := range []string{"", "dlv_", "dlv_short", "nounderscore", "dlv_" + strings.Repeat("u", 26)} {
		if _, ok := Time(bad); ok {
			t.Errorf("Time(%q) ok", bad)
		}
	}
}
