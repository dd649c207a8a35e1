package engine

import (
	"strconv"
	"testing"
	"unique"
)

// Renderer pools are kept for at most maxRendererShapes selections: clients
// choose their selections, and a pool is never removed.
func TestRendererPoolsAreBounded(t *testing.T) {
	e := &Schema{}
	first := unique.Make("shape-0")
	for i := range maxRendererShapes {
		if e.rendererPool(unique.Make("shape-"+strconv.Itoa(i))) == nil {
			t.Fatalf("no pool for shape %d, under the bound", i)
		}
	}
	if p := e.rendererPool(unique.Make("one-too-many")); p != nil {
		t.Fatal("a pool past the bound")
	}
	if a, b := e.rendererPool(first), e.rendererPool(first); a == nil || a != b {
		t.Fatal("a known shape lost its pool")
	}
	if n := e.rendererShapes.Load(); n != maxRendererShapes {
		t.Fatalf("%d shapes counted, want %d", n, maxRendererShapes)
	}
}
