package config

import (
	"strings"
	"testing"
)

func TestDBPrepare(t *testing.T) {
	for _, tt := range []struct {
		value   string
		want    bool
		wantErr bool
	}{{"", true, false}, {"false", false, false}, {"true", true, false}, {"sometimes", false, true}} {
		env := map[string]string{"VOUCHER_DB_PREPARE": tt.value}
		c, err := Load(nil, func(k string) string { return env[k] })
		if tt.wantErr {
			if err == nil || !strings.Contains(err.Error(), "VOUCHER_DB_PREPARE") {
				t.Fatalf("Load with %q = %v, want a VOUCHER_DB_PREPARE error", tt.value, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if c.DBPrepare != tt.want {
			t.Fatalf("VOUCHER_DB_PREPARE=%q: DBPrepare = %v, want %v", tt.value, c.DBPrepare, tt.want)
		}
	}
}

func TestParseOrigins(t *testing.T) {
	got, err := ParseOrigins(" https://Dash.Example.com ,http://localhost:5173, https://dash.example.com/ ,")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://dash.example.com", "http://localhost:5173"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got %q, want %q", got, want)
	}
	for _, bad := range []string{"*", "dash.example.com", "ftp://x.example", "https://x.example/app", "https://u@x.example", "https://x.example?q=1", "https://"} {
		if _, err := ParseOrigins(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := Load(nil, func(k string) string {
		if k == "VOUCHER_CORS_ORIGINS" {
			return "https://ok.example, nope"
		}
		return ""
	}); err == nil || !strings.Contains(err.Error(), "VOUCHER_CORS_ORIGINS") {
		t.Fatalf("Load with a bad origin: %v", err)
	}
}

// VOUCHER_PUBSUB_URL: empty by default (LISTEN/NOTIFY); one or more
// nats:// servers on PostgreSQL; anything else is refused, without the
// value (it may carry credentials) in the message.
func TestPubSubURL(t *testing.T) {
	const pg = "postgres://u@127.0.0.1/db"
	for _, tt := range []struct {
		db, value string
		ok        bool
	}{
		{pg, "", true},
		{"sqlite://./x.db", "", true},
		{pg, "nats://127.0.0.1:4222", true},
		{pg, "nats://user:pw@a.example:4222, nats://b.example:4222", true},
		{pg, "tls://nats.example:4222", true},
		{pg, "http://user:hunter2@127.0.0.1:4222", false},
		{pg, "nats://", false},
		{pg, "nats://127.0.0.1:4222/path", false},
		{pg, "nats://127.0.0.1:4222,", false},
		{"sqlite://./x.db", "nats://127.0.0.1:4222", false},
	} {
		env := map[string]string{"VOUCHER_DATABASE_URL": tt.db, "VOUCHER_PUBSUB_URL": tt.value}
		c, err := Load(nil, func(k string) string { return env[k] })
		if tt.ok {
			if err != nil {
				t.Fatalf("%s with %q: %v", tt.db, tt.value, err)
			}
			if c.PubSubURL != strings.TrimSpace(tt.value) {
				t.Fatalf("PubSubURL %q", c.PubSubURL)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "VOUCHER_PUBSUB_URL") {
			t.Fatalf("%s with %q: %v, want a VOUCHER_PUBSUB_URL error", tt.db, tt.value, err)
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Fatalf("the error repeats the URL: %v", err)
		}
	}
}
