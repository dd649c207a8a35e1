package netguard

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateURL(t *testing.T) {
	long := "https://example.com/" + strings.Repeat("a", MaxURLLength-len("https://example.com/"))
	tooLong := long + "a"

	type tc struct {
		url      string
		strict   bool   // valid with allowPrivate=false
		lenient  bool   // valid with allowPrivate=true
		contains string // part of the strict refusal reason
	}
	cases := []tc{
		// Valid everywhere.
		{"https://example.com", true, true, ""},
		{"https://example.com/", true, true, ""},
		{"https://hooks.example.com/webhooks/voucherd?token=abc&x=1", true, true, ""},
		{"https://example.com:8443/hook", true, true, ""},
		{"https://EXAMPLE.com/Hook", true, true, ""},
		{"HTTPS://example.com/hook", true, true, ""},
		{"https://example.com./hook", true, true, ""},
		{"https://xn--bcher-kva.example/hook", true, true, ""},
		{"https://my_host.example.com/", true, true, ""},
		{"https://8.8.8.8/hook", true, true, ""},
		{"https://[2606:4700:4700::1111]/hook", true, true, ""},
		{"https://[2606:4700:4700::1111]:8443/hook", true, true, ""},
		{"https://[::ffff:8.8.8.8]/", true, true, ""},
		{"https://a.b.c.d.example.co.uk/", true, true, ""},
		{"https://1example.com/", true, true, ""},
		{"https://example.com1/", true, true, ""},
		{"https://example.0xg/", true, true, ""},
		{long, true, true, ""},

		// Scheme.
		{"http://example.com/hook", false, true, "https"},
		{"ftp://example.com/hook", false, false, "https"},
		{"ws://example.com/hook", false, false, "https"},
		{"javascript:alert(1)", false, false, "absolute"},
		{"file:///etc/passwd", false, false, "https"},

		// Shape.
		{"", false, false, "empty"},
		{"example.com/hook", false, false, "absolute"},
		{"//example.com/hook", false, false, "absolute"},
		{"/hook", false, false, "absolute"},
		{"https:example.com", false, false, "absolute"},
		{"https://", false, false, "host"},
		{"https:///hook", false, false, "host"},
		{"https://:443/hook", false, false, "host"},
		{"https://user:pass@example.com/", false, false, "credentials"},
		{"https://user@example.com/", false, false, "credentials"},
		{"https://@example.com/", false, false, "credentials"},
		{"https://example.com/#frag", false, false, "fragment"},
		{"https://example.com/#", false, false, "fragment"},
		{"https://example.com:0/", false, false, "port"},
		{"https://example.com:65536/", false, false, "port"},
		{"https://example.com:99999999999999999999/", false, false, "port"},
		{"https://example.com:/", false, false, "port"},
		{"https://example.com:https/", false, false, "valid URL"},
		{"https://exa mple.com/", false, false, "whitespace"},
		{" https://example.com/", false, false, "whitespace"},
		{"https://example.com/\n", false, false, "whitespace"},
		{"https://example.com/a\tb", false, false, "whitespace"},
		{"https://example.com/\x00", false, false, "control"},
		{"https://example.com/\x7f", false, false, "control"},
		{"https://[::1/", false, false, "valid URL"},
		{"https://%zz/", false, false, "valid URL"},
		{tooLong, false, false, "2048"},

		// Private IP literals.
		{"https://127.0.0.1/", false, true, "non-public"},
		{"https://127.0.0.1:8080/hook", false, true, "non-public"},
		{"http://127.0.0.1:8080/hook", false, true, "https"},
		{"https://10.0.0.1/", false, true, "non-public"},
		{"https://192.168.1.10/", false, true, "non-public"},
		{"https://172.20.0.5/", false, true, "non-public"},
		{"https://169.254.169.254/latest/meta-data/", false, true, "non-public"},
		{"https://100.64.1.1/", false, true, "non-public"},
		{"https://0.0.0.0/", false, true, "non-public"},
		{"https://224.0.0.1/", false, true, "non-public"},
		{"https://255.255.255.255/", false, true, "non-public"},
		{"https://[::1]/", false, true, "non-public"},
		{"https://[::]/", false, true, "non-public"},
		{"https://[fe80::1]/", false, true, "non-public"},
		{"https://[fe80::1%25eth0]/", false, true, "non-public"},
		{"https://[fd00::1]/", false, true, "non-public"},
		{"https://[::ffff:127.0.0.1]/", false, true, "non-public"},
		{"https://[::ffff:169.254.169.254]/", false, true, "non-public"},
		{"https://[64:ff9b::7f00:1]/", false, true, "non-public"},

		// Obfuscated IPv4 that some resolvers and browsers honour.
		{"https://2130706433/", false, true, "fully qualified"},
		{"https://0x7f000001/", false, true, "fully qualified"},
		{"https://127.1/", false, true, "hostname or IP"},
		{"https://0x7f.0x1/", false, true, "hostname or IP"},
		{"https://0177.0.0.1/", false, true, "hostname or IP"},
		{"https://127.0.0.1.nip.io.1/", false, true, "hostname or IP"},

		// Local and reserved names.
		{"https://localhost/", false, true, "local or reserved"},
		{"https://LOCALHOST/", false, true, "local or reserved"},
		{"https://localhost./", false, true, "local or reserved"},
		{"https://localhost:8080/", false, true, "local or reserved"},
		{"https://api.localhost/", false, true, "local or reserved"},
		{"https://printer.local/", false, true, "local or reserved"},
		{"https://metadata.google.internal/", false, true, "local or reserved"},
		{"https://db.corp.internal/", false, true, "local or reserved"},
		{"https://router.home.arpa/", false, true, "local or reserved"},
		{"https://box.localdomain/", false, true, "local or reserved"},
		{"https://foo.test/", false, true, "local or reserved"},
		{"https://foo.invalid/", false, true, "local or reserved"},
		{"https://abc.onion/", false, true, "local or reserved"},
		{"https://intranet/", false, true, "fully qualified"},
		{"https://kubernetes/", false, true, "fully qualified"},

		// Names that only look local.
		{"https://localhost.example.com/", true, true, ""},
		{"https://internal.example.com/", true, true, ""},
		{"https://mylocal/", false, true, "fully qualified"},
		{"https://notlocal.com/", true, true, ""},

		// Bad hostnames.
		{"https://-bad.example.com/", false, true, "valid hostname"},
		{"https://bad-.example.com/", false, true, "valid hostname"},
		{"https://a..example.com/", false, true, "valid hostname"},
		{"https://b\u00fccher.example/", false, true, "valid hostname"},
		{"https://" + strings.Repeat("a", 64) + ".example.com/", false, true, "valid hostname"},
		{"https://" + strings.Repeat("a.", 127) + "com/", false, true, "valid hostname"},
		{"https://example.com../", false, true, "valid hostname"},
	}
	for _, c := range cases {
		name := c.url
		if len(name) > 80 {
			name = name[:80] + "..."
		}
		err := ValidateURL(c.url, false)
		if c.strict {
			if err != nil {
				t.Errorf("ValidateURL(%q, false) = %v, want ok", name, err)
			}
		} else {
			switch {
			case err == nil:
				t.Errorf("ValidateURL(%q, false) = nil, want error about %q", name, c.contains)
			case !errors.Is(err, ErrInvalidURL):
				t.Errorf("ValidateURL(%q, false) = %v, not ErrInvalidURL", name, err)
			case !strings.Contains(err.Error(), c.contains):
				t.Errorf("ValidateURL(%q, false) = %q, want reason containing %q", name, err, c.contains)
			}
		}
		err = ValidateURL(c.url, true)
		if c.lenient && err != nil {
			t.Errorf("ValidateURL(%q, true) = %v, want ok", name, err)
		}
		if !c.lenient && err == nil {
			t.Errorf("ValidateURL(%q, true) = nil, want error", name)
		}
	}
}

func TestValidateURLErrorShape(t *testing.T) {
	raw := "https://user:hunter2@example.com/"
	err := ValidateURL(raw, false)
	var ue *URLError
	if !errors.As(err, &ue) {
		t.Fatalf("err %T is not *URLError", err)
	}
	if ue.Reason == "" || ue.Error() != ue.Reason {
		t.Fatalf("Reason %q / Error %q", ue.Reason, ue.Error())
	}
	for _, in := range []string{raw, "https://%zz/", "https://example.com:https/"} {
		if err := ValidateURL(in, false); err != nil && strings.Contains(err.Error(), in) {
			t.Errorf("error %q echoes the URL", err)
		}
	}
	if err := ValidateURL(raw, false); strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %q echoes credentials", err)
	}
}
