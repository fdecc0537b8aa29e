package turnserver

import (
	"net"
	"net/netip"
	"testing"

	"github.com/pion/logging"

	"github.com/ebrtc/ebrtc/internal/offload"
)

type recordingSink struct{ installed map[offload.Channel]bool }

func (s *recordingSink) AddChannel(ch offload.Channel) error    { s.installed[ch] = true; return nil }
func (s *recordingSink) RemoveChannel(ch offload.Channel) error { delete(s.installed, ch); return nil }
func (s *recordingSink) ChannelStats(offload.Channel) (offload.FlowStats, offload.FlowStats, error) {
	return offload.FlowStats{Packets: 1}, offload.FlowStats{}, nil
}

func udp(s string) net.Addr { return net.UDPAddrFromAddrPort(netip.MustParseAddrPort(s)) }

func newTestTable() (*channelTable, *recordingSink) {
	sink := &recordingSink{installed: map[offload.Channel]bool{}}
	gen := &relayGenerator{
		relayIPs:    []netip.Addr{netip.MustParseAddr("10.0.0.5")},
		externalIPs: []netip.Addr{netip.MustParseAddr("203.0.113.5")},
	}
	return &channelTable{
		sink:         sink,
		udpListeners: map[netip.AddrPort]bool{netip.MustParseAddrPort("0.0.0.0:3478"): true},
		toWire:       gen.toWire,
		peerAllowed:  func(p netip.AddrPort) bool { return p.Port() != 9999 },
		serverFor: func(listener, client netip.AddrPort) (netip.AddrPort, error) {
			return netip.MustParseAddrPort("10.0.0.5:3478"), nil // what the route lookup would pick
		},
		log:         logging.NewDefaultLoggerFactory().NewLogger("t"),
		allocations: map[allocKey]*allocState{},
	}, sink
}

func TestChannelTableFollowsPermissions(t *testing.T) {
	tab, sink := newTestTable()
	client, listener := udp("198.51.100.7:40000"), udp("0.0.0.0:3478")
	relay, peer := udp("203.0.113.5:50000"), udp("192.0.2.9:60000")

	tab.permissionCreated(client, listener, net.ParseIP("192.0.2.9"))
	tab.channelCreated(client, listener, relay, peer, 0x4000)
	want := offload.Channel{
		Client: netip.MustParseAddrPort("198.51.100.7:40000"), Server: netip.MustParseAddrPort("10.0.0.5:3478"),
		Relay: netip.MustParseAddrPort("10.0.0.5:50000"), Peer: netip.MustParseAddrPort("192.0.2.9:60000"), Number: 0x4000,
	}
	if !sink.installed[want] || len(sink.installed) != 1 {
		t.Fatalf("installed %v, want %v (wildcard listener and advertised relay mapped to the wire)", sink.installed, want)
	}

	// Permission expiry takes the channel out of the fast path; a new permission puts it back.
	tab.permissionDeleted(client, listener, net.ParseIP("192.0.2.9"))
	if len(sink.installed) != 0 {
		t.Fatal("channel kept in the fast path without a permission")
	}
	tab.permissionCreated(client, listener, net.ParseIP("192.0.2.9"))
	if !sink.installed[want] {
		t.Fatal("channel not reinstalled with the permission")
	}
	tab.channelDeleted(client, listener, 0x4000)
	if len(sink.installed) != 0 {
		t.Fatal("deleted channel still installed")
	}

	// Allocation deletion removes every channel.
	tab.channelCreated(client, listener, relay, peer, 0x4001)
	tab.channelCreated(client, listener, relay, udp("192.0.2.9:60001"), 0x4002)
	if len(sink.installed) != 2 {
		t.Fatalf("installed %d channels, want 2", len(sink.installed))
	}
	tab.allocationDeleted(client, listener)
	if len(sink.installed) != 0 || len(tab.allocations) != 0 {
		t.Fatal("allocation deletion left state behind")
	}
}

func TestChannelTableOnlyPlainUDP(t *testing.T) {
	tab, sink := newTestTable()
	client, relay, peer := udp("198.51.100.7:40000"), udp("203.0.113.5:50000"), udp("192.0.2.9:60000")
	// TCP/TLS clients (TCP addresses, even on the UDP listener's port), and
	// UDP clients of a listener that is not plain UDP (DTLS), stay in user space.
	tcpClient := &net.TCPAddr{IP: net.ParseIP("198.51.100.7"), Port: 40000}
	tcpListener := &net.TCPAddr{IP: net.IPv4zero, Port: 3478}
	tab.permissionCreated(tcpClient, tcpListener, net.ParseIP("192.0.2.9"))
	tab.channelCreated(tcpClient, tcpListener, relay, peer, 0x4000)
	tab.permissionCreated(client, udp("0.0.0.0:5349"), net.ParseIP("192.0.2.9"))
	tab.channelCreated(client, udp("0.0.0.0:5349"), relay, peer, 0x4000)
	if len(sink.installed) != 0 {
		t.Fatalf("offloaded a channel that is not on a plain UDP listener: %v", sink.installed)
	}
}

// A peer at our own advertised address is our relay: the fast path must see
// the wire address so the hairpin lookup finds the other allocation.
func TestChannelTableMapsAdvertisedPeer(t *testing.T) {
	tab, sink := newTestTable()
	client, listener := udp("198.51.100.7:40000"), udp("0.0.0.0:3478")
	tab.permissionCreated(client, listener, net.ParseIP("203.0.113.5"))
	tab.channelCreated(client, listener, udp("203.0.113.5:50000"), udp("203.0.113.5:50002"), 0x4000)
	for ch := range sink.installed {
		if ch.Peer != netip.MustParseAddrPort("10.0.0.5:50002") {
			t.Fatalf("peer %v not mapped to the wire relay address", ch.Peer)
		}
		return
	}
	t.Fatal("nothing installed")
}
