package turnserver_test

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// A permission for our own relay address (which the hairpin needs) lets
// through only the relay sockets there: a service of the host, answering a
// request forged in a client's name, reaches no client, over UDP or TCP.
func TestHostServicesCannotReachClients(t *testing.T) {
	tb := newTestbed(t)
	r := startRelay(t, tb, "--listen", "tcp://10.201.1.1:3478")
	a, b := minimalClient(t, tb, false), minimalClient(t, tb, false)
	relayIP := netip.AddrPortFrom(testbed.ServerPeerIP4, 0)
	testenv.Must(t, a.CreatePermission(relayIP))
	testenv.Must(t, b.CreatePermission(relayIP))

	service, err := testbed.ListenUDP(tb.Server, netip.AddrPortFrom(testbed.ServerPeerIP4, 9997))
	testenv.Must(t, err)
	defer service.Close()
	for range 10 {
		if _, err := service.WriteTo([]byte("service-reply"), net.UDPAddrFromAddrPort(a.Relay)); err != nil {
			t.Fatal(err)
		}
	}
	if n := countMarked(a.conn, []byte("service-reply")); n != 0 {
		t.Errorf("client received %d datagrams from a host service at the relay address", n)
	}
	// The control: another allocation's relay socket at the same address.
	testenv.Must(t, b.Send(a.Relay, []byte("hairpin-send")))
	if n := countMarked(a.conn, []byte("hairpin-send")); n != 1 {
		t.Errorf("client received %d hairpinned datagrams, want 1: the test proves nothing", n)
	}

	// RFC 6062: a connection from a host socket to a TCP allocation.
	tcp := allocateOver(t, tb, "tcp", false, true)
	testenv.Must(t, tcp.CreatePermission(relayIP))
	before := metrics(t, r)[`ebrtc_turn_dropped_total{reason="refused_peer"}`]
	var conn net.Conn
	testenv.Must(t, tb.Server.Do(func() error {
		d := net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(testbed.ServerPeerIP4, 9995)), Timeout: 2 * time.Second}
		var err error
		conn, err = d.Dial("tcp", tcp.Relay.String())
		return err
	}))
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := conn.Read(make([]byte, 16)); err == nil {
		t.Errorf("the relay kept a connection from a host service (read %d bytes)", n)
	}
	waitMetric(t, r, "the refused connection counted", func(m testbed.Metrics) bool {
		return m[`ebrtc_turn_dropped_total{reason="refused_peer"}`] > before
	})
}

// Datagrams from senders without a permission never spend an allocation's
// bandwidth (user space drops them before its bucket, as pion would drop
// them after): a stranger flooding the relay port at 3x the limit does not
// take a permitted peer's share.
func TestBandwidthLimitNotDrainedByStrangers(t *testing.T) {
	tb := newTestbed(t)
	_, _, c, peer := streamingRelayIn(t, tb, "off", "--max-bps", "800000")
	// The client's first datagram to the peer creates its permission.
	waitRelayed(t, func() error { _, err := c.Relay.WriteTo([]byte("hello-peer"), peer.LocalAddr()); return err }, peer)
	testenv.Must(t, tb.Peer.IP("addr", "add", "10.201.2.3/24", "dev", testbed.PeerIface, "nodad"))
	stranger, err := testbed.ListenUDP(tb.Peer, netip.MustParseAddrPort("10.201.2.3:0"))
	testenv.Must(t, err)
	defer stranger.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // 300 kB/s for at most 10 s
		defer close(done)
		junk := bytes.Repeat([]byte{0xee}, 1000)
		dst := net.UDPAddrFromAddrPort(c.RelayAddr())
		for i := 0; i < 3000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = stranger.WriteTo(junk, dst)
			time.Sleep(3 * time.Millisecond)
		}
	}()
	// The peer: 50 kB/s, half the limit, for 4 s.
	res, err := testbed.ExchangeAt(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, 200, 1000, 50)
	close(stop)
	<-done
	requireExchange(t, "permitted peer during a stranger's flood", res, err)
}
