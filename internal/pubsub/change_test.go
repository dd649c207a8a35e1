package pubsub

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/voucherd/voucherd/ent"
	"github.com/voucherd/voucherd/ent/voucher"
	"github.com/voucherd/voucherd/internal/jsonx"
)

func TestNotificationPayload(t *testing.T) {
	c := VoucherChange{ID: "vch_1", Version: 3, SessionID: "ses_1", BusinessID: "biz_1", PayerID: "dev_1", PayeeID: "usr_1"}
	row := []byte(`{"id":"vch_1","version":3,"extras":[{"note":"a\nb"}]}`)

	b, err := EncodeNotification(c, row)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseNotification(string(b))
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Row) != string(row) {
		t.Fatalf("row %q, want %q", got.Row, row)
	}
	got.Row = nil
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("keys %+v, want %+v", got, c)
	}

	// Too large for NOTIFY: the keys alone.
	big := []byte(`{"id":"vch_1","pad":"` + strings.Repeat("x", MaxRowPayload) + `"}`)
	b, err = EncodeNotification(c, big)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) >= 8000 || strings.Contains(string(b), "\n") {
		t.Fatalf("payload of %d bytes with a row", len(b))
	}
	if got, err := ParseNotification(string(b)); err != nil || got.Row != nil || got.ID != "vch_1" {
		t.Fatalf("keys-only payload: %+v %v", got, err)
	}

	// PostgreSQL's json_build_object spacing, with a row behind it.
	got, err = ParseNotification(`{"id" : "vch_2", "version" : 7, "sessionId" : "ses_2", "businessId" : null, "payerId" : "dev_2", "payeeId" : "ses_9"}` + "\n" + `{"id":"vch_2"}`)
	if err != nil || got.ID != "vch_2" || got.Version != 7 || got.BusinessID != "" || string(got.Row) != `{"id":"vch_2"}` {
		t.Fatalf("pg payload: %+v %v", got, err)
	}
	if _, err := ParseNotification("not json"); err == nil {
		t.Fatal("accepted a malformed payload")
	}
}

// The keys' scanner (no allocation) reads what json.Unmarshal reads, or
// gives up and leaves the payload to it.
func TestScanKeysAgreesWithJSON(t *testing.T) {
	for _, keys := range []string{
		`{"id":"vch_1","version":3,"sessionId":"ses_1","businessId":"biz_1","payerId":"dev_1","payeeId":"usr_1"}`,
		`{"id" : "vch_2", "version" : 7, "sessionId" : "ses_2", "businessId" : null, "payerId" : "dev_2", "payeeId" : "ses_9"}`,
		`{}`, ` { } `, `{"id":"a"}`, `{"version":0}`, `{"id":"a","id":"b"}`,
		`{"id":"v\"x"}`, `{"id":"v\u0041"}`, `{"ID":"upper"}`, `{"id":"a","extra":1}`, `{"version":-1}`,
		`{"version":7.5}`, `{"version":"7"}`, `{"id":1}`, `{"id":"a",}`, `{"id":"a"} x`, `{"id":"a"`, `{"id"`,
		`{"version":99999999999999999999}`, `[]`, `null`, ``, `{"id":null,"version":null}`, `{"id":"é"}`,
	} {
		c, ok := scanKeys(keys)
		var want VoucherChange
		err := json.Unmarshal([]byte(keys), &want)
		if ok && (err != nil || !reflect.DeepEqual(c, want)) {
			t.Errorf("%s: scanned %+v, json %+v (%v)", keys, c, want, err)
		}
		got, _, perr := parseKeys(keys)
		if (perr == nil) != (err == nil) || (err == nil && !reflect.DeepEqual(got, want)) {
			t.Errorf("%s: parsed %+v (%v), json %+v (%v)", keys, got, perr, want, err)
		}
	}
	if n := testing.AllocsPerRun(100, func() {
		_, _ = scanKeys(`{"id" : "vch_2", "version" : 7, "sessionId" : "ses_2", "businessId" : null, "payerId" : "dev_2", "payeeId" : "ses_9"}`)
	}); n != 0 {
		t.Errorf("scanning keys allocates %v times", n)
	}
}

// EncodeChange writes, in one buffer, the bytes EncodeNotification makes
// of the change's keys and its state's row: with the row, without a
// state, and with a row too large for NOTIFY (keys only).
func TestEncodeChangeIsEncodeNotificationOfTheRow(t *testing.T) {
	typ := voucher.TypeSIMPLE
	at := time.Date(2026, 11, 27, 20, 0, 0, 123456789, time.UTC)
	small := &ent.Voucher{ID: "vch_1", Version: 3, Status: voucher.StatusREDEEMED, Type: &typ, SessionID: "ses_1", PayerID: "dev_1",
		PayeeID: "ses_2", CreatedAt: at, UpdatedAt: at, ExpiresAt: at.Add(time.Hour), Reference: ptr(`order <1> & "2" \u2028`)}
	large := *small
	large.PayeeInfo = json.RawMessage(`{"pad":"` + strings.Repeat("x", MaxRowPayload) + `"}`)
	// Three rounds, each payload given back (ReleasePayload) before the
	// next is encoded: a reused buffer encodes the same bytes.
	for round := 0; round < 3; round++ {
		for _, name := range []string{"row", "no state", "too large", "row"} {
			v := map[string]*ent.Voucher{"row": small, "no state": nil, "too large": &large}[name]
			encodeChangeAsNotification(t, name, v)
		}
	}
}

func encodeChangeAsNotification(t *testing.T, name string, v *ent.Voucher) {
	t.Helper()
	c := VoucherChange{ID: "vch_1", Version: 3, SessionID: "ses_1", PayerID: "dev_1", PayeeID: "ses_2", Voucher: v}
	var row []byte
	if v != nil {
		var err error
		if row, err = jsonx.Marshal(v); err != nil {
			t.Fatal(err)
		}
	}
	want, err := EncodeNotification(c, row)
	if err != nil {
		t.Fatal(err)
	}
	got, err := EncodeChange(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("%s:\nEncodeChange       %q\nEncodeNotification %q", name, got, want)
	}
	if hasRow := strings.Contains(string(got), "\n"); hasRow != (name == "row") {
		t.Fatalf("%s: a row in the payload %v", name, hasRow)
	}
	ReleasePayload(got)
}

func ptr[T any](v T) *T { return &v }
