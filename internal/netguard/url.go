package netguard

import (
	"errors"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// MaxURLLength bounds an endpoint URL. 2048 is what browsers and most
// proxies reliably handle; anything longer is a mistake or an attack on
// storage.
const MaxURLLength = 2048

// ErrInvalidURL is wrapped by every error ValidateURL returns.
var ErrInvalidURL = errors.New("invalid webhook url")

// URLError is a refusal by ValidateURL. Its message is only the reason, written
// to be shown to the API caller as a validation detail; it never echoes the
// URL back.
type URLError struct {
	Reason string
}

func (e *URLError) Error() string { return e.Reason }

// Unwrap lets callers test errors.Is(err, ErrInvalidURL).
func (e *URLError) Unwrap() error { return ErrInvalidURL }

func invalid(reason string) error { return &URLError{Reason: reason} }

// Host names that never name a public internet host: RFC 6761 special-use
// names, mDNS (.local), ICANN's private-use .internal (where cloud metadata
// services live), home networks (.home.arpa) and the common .localdomain.
// Matched as the whole name or as a suffix after a dot.
var reservedNames = []string{
	"localhost",
	"local",
	"internal",
	"localdomain",
	"home.arpa",
	"invalid",
	"test",
	"onion",
}

// ValidateURL checks a webhook endpoint URL before it is stored.
//
// Always: at most MaxURLLength characters; no whitespace or control
// characters; an absolute URL with a host; no userinfo (credentials in a URL
// end up in logs and would be sent to whoever the host resolves to); no
// fragment (it is never sent to the server, so it can only be a mistake, and
// refusing it keeps what we store equal to what we request); an explicit port,
// if any, in 1..65535. Query strings are allowed: receivers often put a
// routing token there.
//
// Unless allowPrivate: the scheme must be https (payloads and signatures must
// not cross the internet in clear); an IP literal must be public
// (IsPublicIP); a hostname must be a syntactically valid ASCII DNS name with at
// least one dot, not a reserved name such as localhost or *.internal, and not
// end in a numeric label (browsers and curl read "127.1" or "0x7f.1" as IPv4,
// so they are refused rather than left to each resolver's interpretation).
// Internationalised names must be given in punycode (xn--) form.
//
// With allowPrivate, http is accepted too and the host checks are skipped,
// for local development and tests.
//
// ValidateURL does not resolve the host: resolution at validation time proves
// nothing about delivery time. The dial-time check in NewClient is the one
// that holds.
func ValidateURL(raw string, allowPrivate bool) error {
	if raw == "" {
		return invalid("must not be empty")
	}
	if len(raw) > MaxURLLength {
		return invalid("must be at most " + strconv.Itoa(MaxURLLength) + " characters")
	}
	for i := 0; i < len(raw); i++ {
		if c := raw[i]; c <= ' ' || c == 0x7f {
			return invalid("must not contain whitespace or control characters")
		}
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Parse's error repeats the input; give a fixed reason instead.
		return invalid("is not a valid URL")
	}
	if !u.IsAbs() || u.Opaque != "" {
		return invalid("must be an absolute URL such as https://example.com/webhooks")
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !allowPrivate {
			return invalid("must use the https scheme")
		}
	default:
		if allowPrivate {
			return invalid("must use the https or http scheme")
		}
		return invalid("must use the https scheme")
	}
	if u.User != nil {
		return invalid("must not contain user credentials")
	}
	if strings.Contains(raw, "#") {
		return invalid("must not contain a fragment (#...)")
	}
	host := u.Hostname()
	if host == "" {
		return invalid("must have a host")
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return invalid("port must be between 1 and 65535")
		}
	} else if strings.HasSuffix(u.Host, ":") {
		return invalid("port must be between 1 and 65535")
	}
	if allowPrivate {
		return nil
	}

	if addr, err := netip.ParseAddr(host); err == nil {
		if addr.Zone() != "" || !IsPublicIP(addr) {
			return invalid("must not point to a private, loopback, link-local or otherwise non-public address")
		}
		return nil
	}
	if strings.HasPrefix(u.Host, "[") {
		// Bracketed but not an IP: url.Parse lets some of these through.
		return invalid("host is not a valid IP address")
	}
	return validateHostname(host)
}

func validateHostname(host string) error {
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if name == "" || len(name) > 253 {
		return invalid("host is not a valid hostname")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !validLabel(l) {
			return invalid("host is not a valid hostname (use letters, digits and hyphens; internationalised names in xn-- form)")
		}
	}
	for _, r := range reservedNames {
		if name == r || strings.HasSuffix(name, "."+r) {
			return invalid("host must be a public internet name, not a local or reserved one")
		}
	}
	if len(labels) < 2 {
		// A single label is completed by the resolver's search domains,
		// which point into our own network.
		return invalid("host must be a fully qualified domain name")
	}
	if numericLabel(labels[len(labels)-1]) {
		return invalid("host is not a valid hostname or IP address")
	}
	return nil
}

func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return false
		}
	}
	return true
}

// numericLabel mirrors the WHATWG URL "ends in a number" rule: a last label of
// digits, or 0x followed by hex digits, makes the whole host an IPv4 address
// in browsers' eyes.
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		for i := 0; i < len(h); i++ {
			c := h[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}
