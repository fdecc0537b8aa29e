package hostaddr

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The routing tables know more of the host's addresses than the interfaces
// list: IPv6 subnet-router anycast (with forwarding on), directed
// broadcasts, AnyIP local routes.
func TestReadFindsEveryLocalAddress(t *testing.T) {
	testenv.RequireRoot(t)
	ns, err := netns.New("ebrtc-ha")
	if err != nil {
		testenv.Missing(t, "network namespace: %v", err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	for _, args := range [][]string{
		{"link", "add", "h0", "type", "veth", "peer", "name", "h1"},
		{"link", "set", "h0", "up"},
		{"addr", "add", "10.9.0.5/24", "dev", "h0"},
		{"addr", "add", "2001:db8:1::10/64", "dev", "h0", "nodad"},
		{"route", "add", "local", "10.77.0.0/16", "dev", "lo"},
	} {
		if err := ns.IP(args...); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ns.Output("sysctl", "-qw", "net.ipv6.conf.h0.forwarding=1"); err != nil {
		t.Fatal(err)
	}
	var set *Set
	if err := ns.Do(func() error {
		var err error
		set, err = Read()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"10.9.0.5", "10.9.0.255", "127.0.0.1", "127.9.9.9", "10.77.3.4", "::1", "2001:db8:1::10",
		"2001:db8:1::", "::ffff:10.9.0.5", "ff02::1"} {
		if !set.Contains(netip.MustParseAddr(a)) {
			t.Errorf("%s is the host's, not found", a)
		}
	}
	for _, a := range []string{"10.9.0.6", "10.78.0.1", "2001:db8:1::11", "8.8.8.8"} {
		if set.Contains(netip.MustParseAddr(a)) {
			t.Errorf("%s is not the host's, found", a)
		}
	}
}

// The cache fails closed before its first reading, keeps its last reading
// when a later one fails, and tries again only a TTL later.
func TestCacheFailsClosed(t *testing.T) {
	reads, fail := 0, true
	c := &Cache{ttl: 50 * time.Millisecond, read: func() (*Set, error) {
		reads++
		if fail {
			return nil, errors.New("netlink down")
		}
		return &Set{exact: map[netip.Addr]bool{netip.MustParseAddr("192.0.2.1"): true}}, nil
	}}
	public, own := netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("192.0.2.1")
	if !c.Contains(public) {
		t.Error("with no reading, an address was not taken for the host's")
	}
	fail = false
	if err := c.Refresh(); err != nil || c.Contains(public) || !c.Contains(own) {
		t.Fatalf("after a reading: %v", err)
	}
	fail = true
	time.Sleep(60 * time.Millisecond)
	before := reads
	for range 100 {
		if c.Contains(public) || !c.Contains(own) {
			t.Fatal("a failed reading replaced the last good one")
		}
	}
	if reads-before != 1 {
		t.Errorf("%d reads for 200 lookups after a failure, want 1 per TTL", reads-before)
	}
}
