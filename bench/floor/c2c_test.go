package floor

import (
	"strings"
	"testing"
)

// A change's frame is the captured frame with its own voucher id and
// version in their places, whatever their order and lengths.
func TestFrameTemplate(t *testing.T) {
	for _, c := range []struct {
		frame, id string
		version   int64
	}{
		{`{"type":"next","id":"1","payload":{"data":{"voucherUpdated":{"id":"vch_a","version":7,"status":"NEGOTIATED"}}}}`, "vch_a", 7},
		{`{"type":"next","id":"1","payload":{"data":{"voucherUpdated":{"version":12,"updatedAt":"x","id":"vch_long_one"}}}}`, "vch_long_one", 12},
	} {
		tmpl, err := newFrameTemplate([]byte(c.frame), c.id, c.version)
		if err != nil {
			t.Fatal(err)
		}
		got := string(tmpl.render(nil, "vch_b", 1234))
		want := strings.Replace(strings.Replace(c.frame, `"`+c.id+`"`, `"vch_b"`, 1), `"version":`+map[int64]string{7: "7", 12: "12"}[c.version], `"version":1234`, 1)
		if got != want {
			t.Errorf("rendered %s, want %s", got, want)
		}
	}
	if _, err := newFrameTemplate([]byte(`{"type":"next","payload":{"data":{"voucherUpdated":{"id":"vch_a","version":7}}}}`), "vch_a", 8); err == nil {
		t.Error("a frame without the version it is said to carry is taken")
	}
	if _, err := newFrameTemplate([]byte(`{"type":"next","payload":{"data":{"other":{"id":"vch_a","version":7}}}}`), "vch_a", 7); err == nil {
		t.Error("a frame that is not a voucherUpdated message is taken")
	}
}
