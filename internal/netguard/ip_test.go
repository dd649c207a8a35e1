package netguard

import (
	"net/netip"
	"testing"
)

func TestIsPublicIP(t *testing.T) {
	cases := []struct {
		ip   string
		want bool
	}{
		// Public IPv4.
		{"8.8.8.8", true},
		{"1.1.1.1", true},
		{"93.184.216.34", true},
		{"100.63.255.255", true},  // just below CGNAT
		{"100.128.0.0", true},     // just above CGNAT
		{"172.15.255.255", true},  // just below 172.16/12
		{"172.32.0.0", true},      // just above 172.16/12
		{"169.253.255.255", true}, // just below link-local
		{"192.0.1.1", true},
		{"198.20.0.1", true},       // just above benchmarking
		{"223.255.255.255", true},  // last unicast before multicast
		{"1.0.0.0", true},          // first after 0/8
		{"11.0.0.0", true},         // first after 10/8
		{"126.255.255.255", true},  // just below loopback
		{"128.0.0.0", true},        // just above loopback
		{"192.169.0.0", true},      // just above 192.168/16
		{"203.0.114.1", true},      // just above TEST-NET-3
		{"198.51.101.1", true},     // just above TEST-NET-2
		{"192.88.98.255", true},    // just below 6to4 relay
		{"192.0.3.0", true},        // just above TEST-NET-1
		{"100.64.0.0", false},      // CGNAT start
		{"100.127.255.255", false}, // CGNAT end

		// Non-public IPv4.
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"10.0.0.1", false},
		{"10.255.255.255", false},
		{"127.0.0.1", false},
		{"127.255.255.254", false},
		{"169.254.169.254", false}, // cloud metadata
		{"169.254.0.1", false},
		{"172.16.0.1", false},
		{"172.31.255.255", false},
		{"192.168.1.1", false},
		{"192.0.0.1", false},
		{"192.0.2.1", false},
		{"192.88.99.1", false},
		{"198.18.0.1", false},
		{"198.19.255.255", false},
		{"198.51.100.7", false},
		{"203.0.113.9", false},
		{"224.0.0.1", false},
		{"239.255.255.250", false},
		{"240.0.0.1", false},
		{"255.255.255.255", false},

		// Public IPv6.
		{"2606:4700:4700::1111", true},
		{"2001:4860:4860::8888", true},
		{"2a00:1450:4001:80b::200e", true},
		{"2001:200::1", true}, // just past 2001::/23

		// Non-public IPv6.
		{"::", false},
		{"::1", false},
		{"fe80::1", false},
		{"fe80::1%eth0", false},
		{"febf::1", false},
		{"fc00::1", false},
		{"fd12:3456:789a::1", false},
		{"ff02::1", false},
		{"ff0e::1", false},
		{"100::1", false},                   // discard prefix
		{"2001:db8::1", false},              // documentation
		{"3fff::1", false},                  // documentation (RFC 9637)
		{"2001::1", false},                  // Teredo
		{"2001:2::1", false},                // benchmarking
		{"2001:10::1", false},               // ORCHID
		{"::127.0.0.1", false},              // deprecated IPv4-compatible
		{"::8.8.8.8", false},                // deprecated IPv4-compatible
		{"64:ff9b:1::a00:1", false},         // local-use NAT64
		{"4000::1", false},                  // outside 2000::/3
		{"5f00::1", false},                  // outside 2000::/3 (SRv6 SIDs)
		{"fec0::1", false},                  // deprecated site-local
		{"::ffff:0:0", false},               // mapped 0.0.0.0
		{"::ffff:7f00:1", false},            // mapped 127.0.0.1, hex form
		{"0:0:0:0:0:ffff:a9fe:a9fe", false}, // mapped 169.254.169.254

		// IPv4-mapped IPv6 is judged as IPv4.
		{"::ffff:127.0.0.1", false},
		{"::ffff:10.1.2.3", false},
		{"::ffff:169.254.169.254", false},
		{"::ffff:192.168.0.1", false},
		{"::ffff:100.64.0.1", false},
		{"::ffff:8.8.8.8", true},

		// NAT64 and 6to4 are judged by the IPv4 address they embed.
		{"64:ff9b::8.8.8.8", true},
		{"64:ff9b::127.0.0.1", false},
		{"64:ff9b::a9fe:a9fe", false},
		{"2002:808:808::1", true},  // 6to4 of 8.8.8.8
		{"2002:7f00:1::1", false},  // 6to4 of 127.0.0.1
		{"2002:a00:1::1", false},   // 6to4 of 10.0.0.1
		{"2002:c0a8:101::", false}, // 6to4 of 192.168.1.1
	}
	for _, c := range cases {
		addr, err := netip.ParseAddr(c.ip)
		if err != nil {
			t.Fatalf("bad test address %q: %v", c.ip, err)
		}
		if got := IsPublicIP(addr); got != c.want {
			t.Errorf("IsPublicIP(%s) = %v, want %v", c.ip, got, c.want)
		}
	}
	if IsPublicIP(netip.Addr{}) {
		t.Error("the zero Addr must not be public")
	}
}
