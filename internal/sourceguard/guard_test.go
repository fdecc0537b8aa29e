package sourceguard

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The address map follows the routing tables. A socket with the filter
// takes a datagram from an own address that came through loopback (the
// slow path's hairpin) and drops one forged with that source on a wire,
// which Linux delivers for IPv6 (a socket without the filter gets it).
func TestGuard(t *testing.T) {
	testenv.RequireRoot(t)
	ns, err := netns.New("ebrtc-sg")
	if err != nil {
		testenv.Missing(t, "network namespace: %v", err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	for _, args := range [][]string{
		{"link", "add", "g0", "type", "veth", "peer", "name", "g1"},
		{"link", "set", "g0", "up"}, {"link", "set", "g1", "up"},
		{"addr", "add", "fd42::1/64", "dev", "g0", "nodad"},
	} {
		testenv.Must(t, ns.IP(args...))
	}

	testenv.Must(t, ns.Do(func() error {
		g, err := Load()
		if err != nil {
			return err
		}
		defer g.Close()
		for _, a := range []string{"fd42::1", "::1", "127.0.0.1"} {
			if !g.has(a) {
				t.Errorf("%s missing from the map after Load", a)
			}
		}
		if err := ns.IP("addr", "add", "10.42.0.1/24", "dev", "g0"); err != nil {
			return err
		}
		if err := ns.IP("route", "add", "local", "10.77.0.0/16", "dev", "lo"); err != nil {
			return err
		}
		testenv.Must(t, g.Sync())
		for _, a := range []string{"10.42.0.1", "10.42.0.255", "10.77.1.2"} {
			if !g.has(a) {
				t.Errorf("%s missing from the map after Sync", a)
			}
		}

		guarded, err := (&net.ListenConfig{Control: g.Control}).ListenPacket(t.Context(), "udp6", "[fd42::1]:7000")
		if err != nil {
			return err
		}
		defer guarded.Close()
		plain, err := net.ListenPacket("udp6", "[fd42::1]:7001")
		if err != nil {
			return err
		}
		defer plain.Close()

		// Local: from an own address, through loopback.
		snd, err := net.ListenPacket("udp6", "[fd42::1]:0")
		if err != nil {
			return err
		}
		defer snd.Close()
		if _, err := snd.WriteTo([]byte("local"), guarded.LocalAddr()); err != nil {
			return err
		}
		if !received(guarded) {
			t.Error("a local datagram from an own address was dropped")
		}
		// Forged on the wire: the same source, arriving on g0 from g1.
		for _, dst := range []net.PacketConn{guarded, plain} {
			u := frame.UDP{Src: netip.MustParseAddrPort("[fd42::1]:5000"), Dst: addrPort(dst), Payload: []byte("forged")}
			if err := testbed.Inject(ns, "g1", ns, "g0", u); err != nil {
				return err
			}
		}
		if received(guarded) {
			t.Error("a datagram forged from an own address reached the guarded socket")
		}
		if !received(plain) {
			t.Error("the forged datagram did not reach an unguarded socket either: the test proves nothing")
		}
		if n, _ := g.Dropped(); n != 1 {
			t.Errorf("dropped %d datagrams, want 1", n)
		}
		return nil
	}))
}

func received(c net.PacketConn) bool {
	_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, _, err := c.ReadFrom(make([]byte, 64))
	return err == nil
}

func addrPort(c net.PacketConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

func (g *Guard) has(s string) bool {
	a := netip.MustParseAddr(s)
	var v uint8
	return g.objs.HostAddrs.Lookup(key(netip.PrefixFrom(a, a.BitLen())), &v) == nil
}
