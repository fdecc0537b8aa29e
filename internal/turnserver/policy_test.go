package turnserver

import (
	"net/netip"
	"testing"
)

func TestPeerPolicyDefaults(t *testing.T) {
	p, err := NewPeerPolicy(nil, nil, []netip.Addr{netip.MustParseAddr("10.9.9.9")})
	if err != nil {
		t.Fatal(err)
	}
	refused := []string{"127.0.0.1", "0.0.0.0", "10.1.2.3", "172.20.0.1", "192.168.1.1", "100.64.0.1",
		"169.254.169.254", "224.0.0.251", "240.0.0.1", "255.255.255.255", "192.0.2.1", "198.51.100.1",
		"203.0.113.1", "198.18.0.1", "::", "::1", "fe80::1", "fc00::1", "fd12::1", "ff02::1", "2001:db8::1",
		"::ffff:127.0.0.1", "::ffff:10.0.0.1", "::a00:1", "5f00::1", "4000::1", "c000::1", "fec0::1"}
	for _, a := range refused {
		if p.Allowed(netip.MustParseAddr(a)) {
			t.Errorf("%s allowed by default", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "2606:4700::1111", "10.9.9.9"} {
		if !p.Allowed(netip.MustParseAddr(a)) {
			t.Errorf("%s refused (public, or our own relay address)", a)
		}
	}
}

func TestPeerPolicyAllowAndDeny(t *testing.T) {
	p, err := NewPeerPolicy([]string{"10.0.0.0/8", "fd00::/8"}, []string{"10.66.0.0/16", "8.8.8.8", "10.9.9.9"}, []netip.Addr{netip.MustParseAddr("10.9.9.9")})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]bool{"10.1.1.1": true, "fd00::5": true, "10.66.1.1": false, "8.8.8.8": false, "10.9.9.9": false, "127.0.0.1": false}
	// Nothing opens what delivers to the host itself: loopback, unspecified, multicast, broadcast.
	wide, err := NewPeerPolicy([]string{"0.0.0.0/0", "::/0"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"127.0.0.1", "0.0.0.0", "224.0.0.251", "255.255.255.255", "::1", "::", "ff02::fb"} {
		if wide.Allowed(netip.MustParseAddr(a)) {
			t.Errorf("%s allowed by --allow-peer 0.0.0.0/0 ::/0", a)
		}
	}
	for a, want := range cases {
		if got := p.Allowed(netip.MustParseAddr(a)); got != want {
			t.Errorf("%s: allowed %v, want %v (deny always wins)", a, got, want)
		}
	}
}
