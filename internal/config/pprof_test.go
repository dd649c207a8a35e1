package config

import (
	"strings"
	"testing"
)

func TestPprofAddr(t *testing.T) {
	tests := []struct {
		name, value, want string
		wantErr           bool
	}{
		{"off by default", "", "", false},
		{"loopback port", "127.0.0.1:6060", "127.0.0.1:6060", false},
		{"not host:port", "6060", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{"VOUCHER_PPROF_ADDR": tt.value}
			c, err := Load(nil, func(k string) string { return env[k] })
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "VOUCHER_PPROF_ADDR") {
					t.Fatalf("Load with %q = %v, want a VOUCHER_PPROF_ADDR error", tt.value, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.PprofAddr != tt.want {
				t.Fatalf("PprofAddr = %q, want %q", c.PprofAddr, tt.want)
			}
		})
	}
}
