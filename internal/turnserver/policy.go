package turnserver

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/hostaddr"
)

// Ranges refused as peers unless allowed explicitly: loopback, unspecified,
// private, CGNAT, link-local (cloud metadata included), multicast, reserved,
// documentation and benchmarking ranges (after eturnal's "recommended"
// blacklist and the IANA special-purpose registries). For IPv6 only global
// unicast (2000::/3) is a peer by default, less its special ranges: the rest
// (IPv4-compatible, NAT64, discard, ULA, link-local, site-local, multicast,
// SRv6, unassigned) is refused. IPv4-mapped IPv6 addresses are unmapped
// first and judged as IPv4.
var defaultDenied = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
	"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"255.255.255.255/32",
	"::/3", "4000::/2", "8000::/1", // all but 2000::/3
	"2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20",
)

// neverPeers reach this host whatever allow-peer says: sending to the
// unspecified address or to loopback delivers locally, and multicast and
// broadcast loop back to the host's own listeners.
var neverPeers = mustPrefixes("0.0.0.0/8", "127.0.0.0/8", "224.0.0.0/4", "255.255.255.255/32",
	"::/128", "::1/128", "ff00::/8")

// PeerPolicy decides which peer addresses a client may relay to. The host
// itself is never a peer: its loopback, multicast, and every address its
// routing tables call its own are refused whatever allow-peer says, except
// its relay (and advertised) addresses, which two clients of this server need to reach each other
// (hairpin). Those are refused again per port by relayGenerator.peerAllowed:
// only live relay ports are peers, never a service of the host.
type PeerPolicy struct {
	allow, deny []netip.Prefix
	own         map[netip.Addr]bool
	host        func(netip.Addr) bool
}

// NewPeerPolicy builds a policy. own are this server's relay (and advertised)
// addresses: allowed as peers for the hairpin, unless a deny rule covers them.
func NewPeerPolicy(allow, deny []string, own []netip.Addr) (*PeerPolicy, error) {
	p := &PeerPolicy{own: map[netip.Addr]bool{}, host: hostAddresses.Contains}
	var err error
	if p.allow, err = parsePrefixes("allow-peer", allow); err != nil {
		return nil, err
	}
	if p.deny, err = parsePrefixes("deny-peer", deny); err != nil {
		return nil, err
	}
	for _, a := range own {
		p.own[a.Unmap()] = true
	}
	return p, nil
}

// Allowed reports whether ip may be a peer: --deny-peer always wins, then
// the relay addresses are allowed (each live relay port of them: the
// hairpin), then the host's other addresses are refused, then --allow-peer,
// then the default refusal. A zone (fe80::1%eth0) does not change the verdict.
func (p *PeerPolicy) Allowed(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	if !ip.IsValid() || containsAny(p.deny, ip) {
		return false
	}
	if p.own[ip] {
		return true
	}
	if containsAny(neverPeers, ip) || p.host(ip) {
		return false
	}
	if containsAny(p.allow, ip) {
		return true
	}
	return !containsAny(defaultDenied, ip)
}

// IsOwn reports whether ip is one of this server's relay (or advertised)
// addresses, where only live relay ports may be peers.
func (p *PeerPolicy) IsOwn(ip netip.Addr) bool { return p.own[ip.WithZone("").Unmap()] }

func containsAny(prefixes []netip.Prefix, ip netip.Addr) bool {
	for _, pr := range prefixes {
		if pr.Contains(ip) {
			return true
		}
	}
	return false
}

func parsePrefixes(key string, values []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(values))
	for _, v := range values {
		pr, err := netip.ParsePrefix(v)
		if err != nil {
			// Not a prefix: an address, maybe with a zone (dropped), but never
			// a broken prefix whose "/" ParseAddr would take as part of a zone.
			a, aerr := netip.ParseAddr(v)
			if aerr != nil || strings.Contains(v, "/") {
				return nil, fmt.Errorf("%s: %q is not a CIDR or an IP address", key, v)
			}
			pr = netip.PrefixFrom(a, a.BitLen())
		}
		pr = pr.Masked()
		if pr.Addr().Is4In6() {
			pr = netip.PrefixFrom(pr.Addr().Unmap(), pr.Bits()-96)
		}
		out = append(out, pr)
	}
	return out, nil
}

func mustPrefixes(values ...string) []netip.Prefix {
	out, err := parsePrefixes("default", values)
	if err != nil {
		panic(err)
	}
	return out
}

// hostAddresses are this host's addresses as its routing tables say
// (interface addresses, broadcasts, IPv6 subnet-router anycast, AnyIP
// routes), read again at most once a second. Start reads them first and
// fails if it cannot; until then every address counts as the host's.
var hostAddresses = hostaddr.NewCache(time.Second)
