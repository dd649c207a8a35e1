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
