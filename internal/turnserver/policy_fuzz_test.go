package turnserver

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// fuzzPrefix is the oracle's reading of one --allow-peer/--deny-peer value:
// a CIDR or a single address, in 128-bit form (IPv4 as ::ffff:a.b.c.d/96+n).
type fuzzPrefix struct {
	addr [16]byte
	bits int
	v4   bool // covers only IPv4 (written as IPv4 or as an IPv4-mapped prefix of /96 or longer)
}

func oraclePrefix(v string) (fuzzPrefix, bool) {
	addrPart, _, hasBits := strings.Cut(v, "/")
	a, err := netip.ParseAddr(addrPart)
	if err != nil {
		return fuzzPrefix{}, false
	}
	bits := a.BitLen()
	if hasBits {
		pr, err := netip.ParsePrefix(v)
		if err != nil {
			return fuzzPrefix{}, false
		}
		bits = pr.Bits()
	} else if a.Zone() != "" {
		a = a.WithZone("")
	}
	p := fuzzPrefix{addr: a.As16(), bits: bits}
	if a.Is4() {
		p.bits += 96
	}
	p.v4 = p.bits >= 96 && (a.Is4() || a.Is4In6())
	return p, true
}

// covers judges ip (IPv4-mapped or not) in its IPv4 form: an IPv6 prefix
// shorter than /96 never covers IPv4 peers, an IPv4 one never IPv6 peers.
func (p fuzzPrefix) covers(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.Is4() != p.v4 {
		return false
	}
	b := ip.As16()
	for i := range p.bits {
		mask := byte(0x80) >> (i % 8)
		if b[i/8]&mask != p.addr[i/8]&mask {
			return false
		}
	}
	return true
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// addrFrom reads a peer address as the server gets it (net.IP bytes: no zone).
func addrFrom(b []byte) (netip.Addr, bool) {
	switch {
	case len(b) >= 16:
		return netip.AddrFrom16([16]byte(b[:16])), true
	case len(b) >= 4:
		return netip.AddrFrom4([4]byte(b[:4])), true
	}
	return netip.Addr{}, false
}

// mappedForm rewrites an IPv4 rule as the equivalent IPv4-mapped IPv6 rule.
func mappedForm(v string) string {
	a, bits, hasBits := strings.Cut(v, "/")
	ip, err := netip.ParseAddr(a)
	if err != nil || !ip.Is4() {
		return v
	}
	if !hasBits {
		return netip.AddrFrom16(ip.As16()).String()
	}
	var n int
	if _, err := fmt.Sscanf(bits, "%d", &n); err != nil || fmt.Sprint(n) != bits {
		return v
	}
	return fmt.Sprintf("%s/%d", netip.AddrFrom16(ip.As16()), n+96)
}

// fuzzPolicy is NewPeerPolicy with the host's interface addresses replaced
// by host (the real ones are those of the machine running the test).
func fuzzPolicy(allow, deny []string, own []netip.Addr, host netip.Addr) (*PeerPolicy, error) {
	p, err := NewPeerPolicy(allow, deny, own)
	if err == nil {
		p.host = func(a netip.Addr) bool { return host.IsValid() && a.Unmap() == host.Unmap() }
	}
	return p, err
}

// FuzzPeerPolicy: NewPeerPolicy refuses exactly the values that are neither
// a CIDR nor an IP, naming the flag; Allowed lets --deny-peer win over
// everything, allows the server's own relay addresses, never allows
// loopback or unspecified addresses, refuses the host's other addresses, then
// allows --allow-peer, then refuses the special-purpose ranges; an
// IPv4-mapped address (and an IPv4-mapped rule) is judged like its IPv4
// form.
func FuzzPeerPolicy(f *testing.F) {
	v4 := func(s string) []byte { a := netip.MustParseAddr(s).As4(); return a[:] }
	v6 := func(s string) []byte { a := netip.MustParseAddr(s).As16(); return a[:] }
	f.Add("", "", v4("10.9.9.9"), v4("10.9.9.9"), v4("10.9.9.9"))
	f.Add("10.0.0.0/8,fd00::/8", "10.66.0.0/16,8.8.8.8,10.9.9.9", v4("10.9.9.9"), v4("10.1.1.1"), v4("10.66.1.1"))
	f.Add("10.0.0.0/8", "", []byte{}, v4("10.1.1.1"), v4("10.1.1.1"))
	f.Add("::ffff:10.0.0.0/104", "", []byte{}, []byte{}, v6("::ffff:10.1.2.3"))
	f.Add("", "::ffff:0:0/96", v4("8.8.8.8"), []byte{}, v4("8.8.8.8"))
	f.Add("127.0.0.1", "", v6("::ffff:127.0.0.1"), []byte{}, v6("::ffff:127.0.0.1"))
	f.Add("0.0.0.0/0", "", []byte{}, v4("203.0.113.1"), v6("::ffff:203.0.113.1"))
	f.Add("fe80::1%eth0", "2001:db8::/32", v6("2001:db8::7"), v6("fe80::1"), v6("fe80::1"))
	f.Add("", "::/0", []byte{}, []byte{}, v4("1.1.1.1"))
	f.Add("x", "", []byte{}, []byte{}, v4("1.1.1.1"))
	f.Add("10.0.0.0/33", "10.0.0.0/8", []byte{}, []byte{}, v4("10.0.0.1"))

	f.Fuzz(func(t *testing.T, allowText, denyText string, ownBytes, hostBytes, ipBytes []byte) {
		ip, ok := addrFrom(ipBytes)
		if !ok {
			return
		}
		allow, deny := splitList(allowText), splitList(denyText)
		var own []netip.Addr
		if a, ok := addrFrom(ownBytes); ok {
			own = append(own, a)
		}
		host, _ := addrFrom(hostBytes)
		p, err := fuzzPolicy(allow, deny, own, host)

		var allowP, denyP []fuzzPrefix
		var wantErr string
		for _, l := range []struct {
			key    string
			values []string
			out    *[]fuzzPrefix
		}{{"allow-peer", allow, &allowP}, {"deny-peer", deny, &denyP}} {
			for _, v := range l.values {
				pr, ok := oraclePrefix(v)
				if !ok && wantErr == "" {
					wantErr = l.key + ": "
				}
				*l.out = append(*l.out, pr)
			}
		}
		if wantErr != "" {
			if err == nil || !strings.HasPrefix(err.Error(), wantErr) {
				t.Fatalf("allow %q deny %q: error %v, want one starting with %q", allow, deny, err, wantErr)
			}
			return
		}
		if err != nil {
			t.Fatalf("allow %q deny %q refused: %v", allow, deny, err)
		}

		got := p.Allowed(ip)
		denied, allowed := false, false
		for _, pr := range denyP {
			denied = denied || pr.covers(ip)
		}
		for _, pr := range allowP {
			allowed = allowed || pr.covers(ip)
		}
		u := ip.Unmap()
		isOwn := false
		for _, a := range own {
			isOwn = isOwn || a.Unmap() == u
		}
		never := u.IsLoopback() || u.IsUnspecified() || u.IsMulticast() || (u.Is4() && u.As4()[0] == 0) ||
			u == netip.AddrFrom4([4]byte{255, 255, 255, 255})
		isHost := host.IsValid() && host.Unmap() == u
		special := u.IsLoopback() || u.IsPrivate() || u.IsUnspecified() || u.IsMulticast() ||
			u.IsLinkLocalUnicast() || u.IsLinkLocalMulticast() || u.IsInterfaceLocalMulticast()
		switch {
		case denied:
			if got {
				t.Fatalf("%v allowed although --deny-peer %q covers it (allow %q, own %v)", ip, deny, allow, own)
			}
		case isOwn: // even on loopback: only its live relay ports are peers (relayGenerator)
			if !got {
				t.Fatalf("own relay address %v refused (allow %q deny %q)", ip, allow, deny)
			}
		case never:
			if got {
				t.Fatalf("%v allowed although it is this host (allow %q, own %v)", ip, allow, own)
			}
		case isHost:
			if got {
				t.Fatalf("host address %v allowed (allow %q, own %v)", ip, allow, own)
			}
		case allowed:
			if !got {
				t.Fatalf("%v refused although --allow-peer %q covers it and no --deny-peer %q", ip, allow, deny)
			}
		case special:
			if got {
				t.Fatalf("special-purpose %v allowed without an --allow-peer", ip)
			}
		}

		if p.IsOwn(ip) != isOwn {
			t.Fatalf("IsOwn(%v) = %v with own %v", ip, !isOwn, own)
		}
		// IPv4-mapped addresses are judged like their IPv4 form.
		if u.Is4() {
			if m := netip.AddrFrom16(u.As16()); p.Allowed(m) != p.Allowed(u) {
				t.Fatalf("%v and %v judged differently", u, m)
			}
		}
		// So are IPv4 rules written in IPv4-mapped form.
		var allowM, denyM []string
		for _, v := range allow {
			allowM = append(allowM, mappedForm(v))
		}
		for _, v := range deny {
			denyM = append(denyM, mappedForm(v))
		}
		pm, err := fuzzPolicy(allowM, denyM, own, host)
		if err != nil {
			t.Fatalf("mapped rules allow %q deny %q refused: %v", allowM, denyM, err)
		}
		if pm.Allowed(ip) != got {
			t.Fatalf("%v: allow %q deny %q says %v, the same rules IPv4-mapped (allow %q deny %q) say %v",
				ip, allow, deny, got, allowM, denyM, !got)
		}
		// Denying the peer itself always refuses it, whatever else is allowed.
		pd, err := fuzzPolicy(append(allow, ip.String()), append(deny, ip.String()), append(own, ip), host)
		if err != nil {
			t.Fatal(err)
		}
		if pd.Allowed(ip) {
			t.Fatalf("%v allowed although denied explicitly (and allowed, and own)", ip)
		}
	})
}
