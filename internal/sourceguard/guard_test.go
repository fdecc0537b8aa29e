package sourceguard

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The address map follows the interfaces; a socket with the filter drops a
// datagram from the host's own address that did not come through loopback,
// and takes one that did.
func TestGuard(t *testing.T) {
	testenv.RequireRoot(t)
	ns, err := netns.New("ebrtc-sg")
	if err != nil {
		testenv.Missing(t, "network namespace: %v", err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	must(t, ns.IP("link", "add", "g0", "type", "veth", "peer", "name", "g1"))
	must(t, ns.IP("link", "set", "g0", "up"))
	must(t, ns.IP("link", "set", "g1", "up"))
	must(t, ns.IP("addr", "add", "fd42::1/64", "dev", "g0", "nodad"))

	must(t, ns.Do(func() error {
		g, err := Load()
		if err != nil {
			return err
		}
		defer g.Close()
		if !g.has(netip.MustParseAddr("fd42::1")) || !g.has(netip.MustParseAddr("::1")) || !g.has(netip.MustParseAddr("127.0.0.1")) {
			t.Errorf("map after Load: %v", g.known)
		}
		if err := ns.IP("addr", "add", "10.42.0.1/24", "dev", "g0"); err != nil {
			return err
		}
		if err := ns.IP("addr", "del", "fd42::1/64", "dev", "g0"); err != nil {
			return err
		}
		must(t, g.Sync())
		if !g.has(netip.MustParseAddr("10.42.0.1")) || g.has(netip.MustParseAddr("fd42::1")) {
			t.Errorf("map after the addresses changed: %v", g.known)
		}

		// A socket with the filter: a datagram from an own address over
		// loopback arrives (local traffic, e.g. the slow path's hairpin).
		lc := net.ListenConfig{Control: g.Control}
		pc, err := lc.ListenPacket(t.Context(), "udp4", "10.42.0.1:0")
		if err != nil {
			return err
		}
		defer pc.Close()
		snd, err := net.ListenPacket("udp4", "10.42.0.1:0")
		if err != nil {
			return err
		}
		defer snd.Close()
		if _, err := snd.WriteTo([]byte("local"), pc.LocalAddr()); err != nil {
			return err
		}
		_ = pc.SetReadDeadline(time.Now().Add(time.Second))
		if _, _, err := pc.ReadFrom(make([]byte, 16)); err != nil {
			t.Errorf("local datagram from an own address: %v", err)
		}
		if n, _ := g.Dropped(); n != 0 {
			t.Errorf("dropped %d local datagrams", n)
		}
		return nil
	}))
}

func (g *Guard) has(a netip.Addr) bool {
	var v uint8
	return g.objs.HostAddrs.Lookup(key(a), &v) == nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
