package pubsub

import (
	"reflect"
	"strings"
	"testing"
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
