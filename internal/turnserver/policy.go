package turnserver

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Ranges refused as peers unless allowed explicitly: loopback, unspecified,
// private, CGNAT, link-local (cloud metadata included), multicast, reserved,
// documentation and benchmarking ranges, IPv4 and IPv6 (after eturnal's
// "recommended" blacklist and the IANA special-purpose registries).
// IPv4-mapped IPv6 addresses are unmapped first and judged as IPv4.
var defaultDenied = mustPrefixes(
	"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16",
	"198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
	"255.255.255.255/32",
	"::/128", "::1/128", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64",
	"2001::/23", "2001:db8::/32", "2002::/16", "3fff::/20", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
)

// neverPeers reach this host whatever allow-peer says: sending to the
// unspecified address or to loopback delivers locally.
var neverPeers = mustPrefixes("0.0.0.0/8", "127.0.0.0/8", "::/128", "::1/128")

// PeerPolicy decides which peer addresses a client may relay to. The host
// itself is never a peer: its loopback and every address of its interfaces
// are refused whatever allow-peer says, except its relay (and advertised)
// addresses, which two clients of this server need to reach each other
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
	p := &PeerPolicy{own: map[netip.Addr]bool{}, host: hostAddresses.contains}
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
			a, aerr := netip.ParseAddr(v)
			if aerr != nil {
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

// hostAddresses are the addresses of this host's interfaces, read again at
// most once a second (addresses come and go, peer checks run per datagram).
var hostAddresses = &addressCache{ttl: time.Second, read: interfaceAddresses}

type addressCache struct {
	ttl  time.Duration
	read func() (map[netip.Addr]bool, error)

	mu   sync.Mutex // one reader refreshes; lookups take no lock
	snap atomic.Pointer[addressSnapshot]
}

type addressSnapshot struct {
	addrs   map[netip.Addr]bool
	fetched time.Time
}

func (c *addressCache) contains(a netip.Addr) bool {
	s := c.snap.Load()
	if s == nil || time.Since(s.fetched) > c.ttl {
		s = c.refresh()
	}
	return s.addrs[a.Unmap()]
}

func (c *addressCache) refresh() *addressSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.snap.Load()
	if s != nil && time.Since(s.fetched) <= c.ttl {
		return s // refreshed while we waited
	}
	addrs, err := c.read()
	if err != nil && s != nil {
		return s // keep what was known rather than fail open
	}
	s = &addressSnapshot{addrs: addrs, fetched: time.Now()}
	c.snap.Store(s)
	return s
}

func interfaceAddresses() (map[netip.Addr]bool, error) {
	ifas, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr]bool, len(ifas))
	for _, ia := range ifas {
		if pfx, err := netip.ParsePrefix(ia.String()); err == nil {
			out[pfx.Addr().Unmap()] = true
		}
	}
	return out, nil
}
