package harness

import (
	"math"
	"runtime/debug"
	"testing"
	"time"
)

func TestVoucherUpdateReadsWhatTheDecoderReads(t *testing.T) {
	// The service's frame (graph/wstransport writes type, id, payload),
	// and the same with the keys in another order and spaces.
	for _, frame := range []string{
		`{"type":"next","id":"1","payload":{"data":{"voucherUpdated":{"id":"vch_00a1","version":17,"status":"NEGOTIATED","updatedAt":"2026-11-27T10:00:00.123Z"}}}}`,
		`{"id":"7","payload":{"data":{"voucherUpdated":{"version": 3, "updatedAt":"x","id": "vch_b"}}},"type":"next"}`,
	} {
		u, err := parseUpdate([]byte(frame))
		if err != nil {
			t.Fatal(err)
		}
		id, ver, ok := voucherUpdate([]byte(frame))
		if !ok || string(id) != u.Data.VoucherUpdated.ID || ver != u.Data.VoucherUpdated.Version {
			t.Fatalf("%s: read %q %d %v, decoder %q %d", frame, id, ver, ok, u.Data.VoucherUpdated.ID, u.Data.VoucherUpdated.Version)
		}
		b := []byte(frame)
		if n := testing.AllocsPerRun(100, func() { _, _, _ = voucherUpdate(b) }); n != 0 {
			t.Fatalf("voucherUpdate allocates %.1f times a frame", n)
		}
	}
	// Anything that is not a plain update is left to the decoder, which
	// says what it was.
	for _, frame := range []string{
		`{"type":"next","id":"1","payload":{"data":{"voucherUpdated":null},"errors":[{"message":"not found"}]}}`,
		`{"type":"error","id":"1","payload":[{"message":"bad"}]}`,
		`{"type":"complete","id":"1"}`,
		`{"type":"next","id":"1","payload":{"data":{"voucherUpdated":{"id":"vch_1","status":"X"}}}}`,
	} {
		if id, ver, ok := voucherUpdate([]byte(frame)); ok {
			t.Errorf("%s: read %q %d", frame, id, ver)
		}
	}
	if _, err := parseUpdate([]byte(`{"type":"next","id":"1","payload":{"data":null,"errors":[{"message":"not found"}]}}`)); err == nil {
		t.Error("an error message decodes as an update")
	}
}

// The bench's collector is off between quietGC and its restore (and back
// to what it was after), and selfGC counts what the process allocated and
// collected meanwhile.
func TestQuietGCAndSelfGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	defer debug.SetGCPercent(before)
	restore := quietGC()
	if pct := debug.SetGCPercent(-1); pct != -1 {
		t.Fatalf("collector at %d%% during a quiet phase, want off", pct)
	}
	self := selfGC()
	var keep [][]byte
	for range 1000 {
		keep = append(keep, make([]byte, 64))
	}
	figs := self(100)
	restore()
	if pct := debug.SetGCPercent(100); pct != 100 {
		t.Fatalf("collector at %d%% after the phase, want 100 back", pct)
	}
	got := map[string]float64{}
	for _, f := range figs {
		got[f.Name] = f.Value
	}
	if v := got[SelfAllocsFigure]; v < 10 || len(keep) != 1000 {
		t.Fatalf("allocations per transition %v, want at least the 1,000 made over 100 transitions", v)
	}
	if v := got["bench process: garbage collections during the phase"]; v != 0 {
		t.Fatalf("%v collections with the collector off", v)
	}
}

// A side's turn costs are per transition: both replicas' CPU and each
// one's, the bench's own, PostgreSQL's, and the machine's (its ticks are
// hundredths of a second).
func TestTurnCostFigures(t *testing.T) {
	c := turnCost{cpu: 600 * time.Millisecond, each: []time.Duration{450 * time.Millisecond, 150 * time.Millisecond},
		self: 200 * time.Millisecond, pg: 500 * time.Millisecond, busy: 130, total: 200, n: 1000}
	got := map[string]float64{}
	for _, f := range c.figures() {
		got[f.Name] = f.Value
	}
	want := map[string]float64{
		"server CPU per transition (both replicas, during its turns)":                         0.6,
		"of which the committing replica's":                                                   0.45,
		"of which the other replica's":                                                        0.15,
		"bench process CPU per transition (load generator and subscribers, during its turns)": 0.2,
		"PostgreSQL CPU per transition (all its processes, during its turns)":                 0.5,
		"machine CPU per transition (every process, during its turns)":                        1.3,
		"machine CPU busy during its turns (both CPUs)":                                       65,
	}
	for name, w := range want {
		if g, ok := got[name]; !ok || math.Abs(g-w) > 1e-9 {
			t.Errorf("%s = %v (present %v), want %v", name, g, ok, w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("figures %v, want exactly %v", got, want)
	}
}
