// Package netguard keeps webhook delivery from being turned against the
// service's own network (SSRF).
//
// Two layers, because neither is enough alone:
//
//   - ValidateURL runs when an endpoint is created or updated and gives the
//     business a clear reason up front (wrong scheme, a private IP literal, a
//     name like localhost).
//   - NewClient's dialer checks the address every connection actually goes
//     to, after DNS resolution. A hostname that passed validation can later
//     resolve to 127.0.0.1 or 169.254.169.254 (DNS rebinding, or a record
//     simply changed); only a check at connect time sees that.
//
// The client also never uses a proxy and never follows redirects: either would
// let a public endpoint bounce the request to a destination nobody checked.
//
// AllowPrivate (VOUCHER_WEBHOOK_ALLOW_PRIVATE) turns both layers off for local
// development and tests, where receivers run on loopback over plain http.
package netguard

import "net/netip"

// nonPublicV4 lists IPv4 ranges that are not reachable on the public
// internet, or that reach this host or its neighbours, per the IANA special
// purpose registry. Kept as prefixes rather than netip's Is* helpers alone so
// the whole policy is visible in one place.
var nonPublicV4 = mustPrefixes(
	"0.0.0.0/8",          // "this network"; 0.0.0.0 reaches the local host on Linux
	"10.0.0.0/8",         // RFC 1918 private
	"100.64.0.0/10",      // carrier-grade NAT (RFC 6598)
	"127.0.0.0/8",        // loopback
	"169.254.0.0/16",     // link-local, cloud metadata (169.254.169.254)
	"172.16.0.0/12",      // RFC 1918 private
	"192.0.0.0/24",       // IETF protocol assignments
	"192.0.2.0/24",       // TEST-NET-1 documentation
	"192.88.99.0/24",     // deprecated 6to4 relay anycast
	"192.168.0.0/16",     // RFC 1918 private
	"198.18.0.0/15",      // benchmarking
	"198.51.100.0/24",    // TEST-NET-2 documentation
	"203.0.113.0/24",     // TEST-NET-3 documentation
	"224.0.0.0/4",        // multicast
	"240.0.0.0/4",        // reserved for future use
	"255.255.255.255/32", // limited broadcast (inside 240/4; listed for clarity)
)

// IPv6 is judged by allow-list: only global unicast (2000::/3) can be public,
// which by itself excludes ::, ::1, fc00::/7, fe80::/10, ff00::/8, the
// discard prefix and the deprecated IPv4-compatible form. Inside 2000::/3 these
// are still refused:
var nonPublicV6 = mustPrefixes(
	"2001::/23",     // IETF protocol assignments: Teredo, benchmarking, ORCHID
	"2001:db8::/32", // documentation
	"3fff::/20",     // documentation (RFC 9637)
)

// Prefixes that carry an IPv4 address inside an IPv6 one. A translator or
// relay would deliver to the embedded IPv4 address, so that is what is judged.
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96") // RFC 6052, v4 in the last 32 bits
	sixToFour      = netip.MustParsePrefix("2002::/16")    // RFC 3056, v4 in bits 16..47
)

// IsPublicIP reports whether addr is a public unicast address a webhook may be
// delivered to. IPv4-mapped IPv6 (::ffff:a.b.c.d) is judged as the IPv4
// address it carries, as are NAT64 (64:ff9b::/96) and 6to4 (2002::/16)
// addresses. Invalid addresses are not public.
func IsPublicIP(addr netip.Addr) bool {
	if !addr.IsValid() {
		return false
	}
	// A zone only makes sense on link-local and similar scoped addresses; drop
	// it so prefix matching sees the bare address.
	addr = addr.WithZone("").Unmap()
	if addr.Is4() {
		return isPublicV4(addr)
	}
	if nat64WellKnown.Contains(addr) {
		b := addr.As16()
		return isPublicV4(netip.AddrFrom4([4]byte(b[12:16])))
	}
	if sixToFour.Contains(addr) {
		b := addr.As16()
		return isPublicV4(netip.AddrFrom4([4]byte(b[2:6])))
	}
	if !globalUnicastV6.Contains(addr) {
		return false
	}
	for _, p := range nonPublicV6 {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

var globalUnicastV6 = netip.MustParsePrefix("2000::/3")

func isPublicV4(addr netip.Addr) bool {
	for _, p := range nonPublicV4 {
		if p.Contains(addr) {
			return false
		}
	}
	return true
}

func mustPrefixes(ss ...string) []netip.Prefix {
	ps := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		ps[i] = netip.MustParsePrefix(s)
	}
	return ps
}
