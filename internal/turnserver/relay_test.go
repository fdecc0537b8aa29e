package turnserver

import (
	"context"
	"github.com/ebrtc/ebrtc/internal/sockopt"
	"net"
	"net/netip"
	"testing"

	"github.com/pion/turn/v5"
)

// RFC 6062 relay listeners set SO_REUSEPORT (their connections to peers
// leave from the same port), which would let two listeners share a port and
// split its incoming connections: a client could take another allocation's
// connections, or a host service's. So a port already bound, by another
// allocation or by anyone, is never handed out.
func TestTCPRelayPortsAreNotShared(t *testing.T) {
	probe, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	g := &relayGenerator{relayIPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}, minPort: port, maxPort: port}
	conf := turn.AllocateListenerConfig{Network: "tcp4"}

	first, _, err := g.AllocateListener(conf)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.AllocateListener(conf); err == nil {
		t.Fatal("a second TCP allocation got the port of the first")
	}
	first.Close()

	// A service of the host listening there with SO_REUSEPORT.
	service, err := (&net.ListenConfig{Control: sockopt.ReusePort}).Listen(context.Background(), "tcp4", first.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer service.Close()
	if _, _, err := g.AllocateListener(conf); err == nil {
		t.Fatal("a TCP allocation shared the port of a host service")
	}
	service.Close()
	again, _, err := g.AllocateListener(conf)
	if err != nil {
		t.Fatalf("the free port was not handed out again: %v", err)
	}
	again.Close()
	// A requested port outside the range (a reservation, EVEN-PORT) is refused.
	if _, _, err := g.AllocatePacketConn(turn.AllocateListenerConfig{Network: "udp4", RequestedPort: port + 1}); err == nil {
		t.Fatal("a port outside the relay range was bound")
	}
}
