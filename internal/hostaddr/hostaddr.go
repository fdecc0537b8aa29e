// Package hostaddr tells whether an address is this host's own, as the
// kernel's routing tables say: whatever it would deliver locally (RTN_LOCAL)
// or take as a broadcast, anycast or multicast address of this host, in any
// table. That covers more than the interfaces' addresses: IPv6 subnet-router
// anycast (added when forwarding is on), directed broadcasts, and AnyIP
// routes ("ip route add local 10.0.0.0/8 dev lo").
package hostaddr

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Set is one reading of the routing tables.
type Set struct {
	exact    map[netip.Addr]bool // /32 and /128 routes
	prefixes []netip.Prefix      // shorter ones (AnyIP, multicast)
}

// Route types that make an address this host's (linux/rtnetlink.h).
const (
	rtnLocal     = 2
	rtnBroadcast = 3
	rtnAnycast   = 4
	rtnMulticast = 5
)

// Read dumps both families' routes over netlink.
func Read() (*Set, error) {
	s := &Set{exact: map[netip.Addr]bool{}}
	for _, family := range []int{syscall.AF_INET, syscall.AF_INET6} {
		if err := s.read(family); err != nil {
			return nil, fmt.Errorf("hostaddr: read routes: %w", err)
		}
	}
	return s, nil
}

func (s *Set) read(family int) error {
	raw, err := syscall.NetlinkRIB(syscall.RTM_GETROUTE, family)
	if err != nil {
		return err
	}
	msgs, err := syscall.ParseNetlinkMessage(raw)
	if err != nil {
		return err
	}
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Type != syscall.RTM_NEWROUTE || len(m.Data) < syscall.SizeofRtMsg {
			continue
		}
		rt := (*syscall.RtMsg)(unsafe.Pointer(&m.Data[0]))
		switch rt.Type {
		case rtnLocal, rtnBroadcast, rtnAnycast, rtnMulticast:
		default:
			continue
		}
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			return err
		}
		for _, a := range attrs {
			if a.Attr.Type != syscall.RTA_DST {
				continue
			}
			if addr, ok := netip.AddrFromSlice(a.Value); ok {
				s.add(netip.PrefixFrom(addr.Unmap(), int(rt.Dst_len)))
			}
		}
	}
	return nil
}

func (s *Set) add(p netip.Prefix) {
	if !p.IsValid() {
		return
	}
	if p.IsSingleIP() {
		s.exact[p.Addr()] = true
		return
	}
	s.prefixes = append(s.prefixes, p.Masked())
}

// Contains reports whether a is one of this host's addresses.
func (s *Set) Contains(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	if s.exact[a] {
		return true
	}
	for _, p := range s.prefixes {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Prefixes lists the set as prefixes (a single address as /32 or /128).
func (s *Set) Prefixes() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(s.exact)+len(s.prefixes))
	for a := range s.exact {
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return append(out, s.prefixes...)
}

// Cache reads the routing tables again at most once per TTL (addresses
// come and go; peer checks run per datagram). Lookups take no lock.
type Cache struct {
	ttl  time.Duration
	read func() (*Set, error)

	mu   sync.Mutex // one caller refreshes
	snap atomic.Pointer[snapshot]
}

type snapshot struct {
	set  *Set
	read time.Time
}

// NewCache makes a cache; Contains fails closed (everything is the host)
// until a first reading succeeds, so call Refresh at start.
func NewCache(ttl time.Duration) *Cache { return &Cache{ttl: ttl, read: Read} }

// Refresh reads the tables now.
func (c *Cache) Refresh() error {
	set, err := c.read()
	if err != nil {
		return err
	}
	c.snap.Store(&snapshot{set: set, read: time.Now()})
	return nil
}

// Contains reports whether a is this host's, from a reading at most TTL
// old; when no reading could ever be made, everything is.
func (c *Cache) Contains(a netip.Addr) bool {
	s := c.snap.Load()
	if s == nil || time.Since(s.read) > c.ttl {
		s = c.refresh()
	}
	if s == nil {
		return true
	}
	return s.set.Contains(a)
}

func (c *Cache) refresh() *snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.snap.Load()
	if old != nil && time.Since(old.read) <= c.ttl {
		return old // refreshed while we waited
	}
	if err := c.Refresh(); err != nil && old != nil {
		// Keep the last reading, and try again a TTL later: stale for a
		// while beats failing open, and a failing read must not run per datagram.
		c.snap.Store(&snapshot{set: old.set, read: time.Now()})
	}
	return c.snap.Load()
}
