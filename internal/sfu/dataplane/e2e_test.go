package dataplane

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// Real sockets on a host as containers have it: the sender's veth hands
// datagrams over with partial checksums (TX offload on), which the eBPF
// data plane must keep partial and right. The SFU's egress finishes them in
// software (TX offload off there), so the receivers' kernels verify every
// checksum: a replica with a wrong one would never reach its socket. The
// user-space data plane, on the SFU's sockets, must deliver the same.
// Datagrams larger than the path's MTU arrive as IP fragments, which the
// eBPF program leaves to the stack: its plane's slow path reads them from
// the socket once reassembled and forwards them on the same state, so
// nothing is lost either way.
func TestReplicasThroughRealSockets(t *testing.T) {
	for _, plane := range []string{"ebpf", "user"} {
		for _, v6 := range []bool{false, true} {
			t.Run(plane+"/"+map[bool]string{false: "ipv4", true: "ipv6"}[v6], func(t *testing.T) { replicasThroughSockets(t, plane, v6) })
		}
	}
}

func replicasThroughSockets(t *testing.T, plane string, v6 bool) {
	testenv.RequireRoot(t)
	tb, err := testbed.NewWith(testbed.Options{Unprepared: true, ServerTxChecksumOff: true})
	if err != nil {
		testenv.Missing(t, "testbed: %v", err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	clientIP, sfuIn, sfuOut, peerIP := testbed.ClientIP4, testbed.ServerClientIP4, testbed.ServerPeerIP4, testbed.PeerIP4
	if v6 {
		clientIP, sfuIn, sfuOut, peerIP = testbed.ClientIP6, testbed.ServerClientIP6, testbed.ServerPeerIP6, testbed.PeerIP6
	}
	var dp Plane
	inSock, err := testbed.ListenUDP(tb.Server, netip.AddrPortFrom(sfuIn, mediaPort))
	testenv.Must(t, err)
	outSock, err := testbed.ListenUDP(tb.Server, netip.AddrPortFrom(sfuOut, mediaPort))
	testenv.Must(t, err)
	if plane == "ebpf" {
		testenv.Must(t, tb.Server.Do(func() error {
			d, err := Load(Config{Media: []netip.AddrPort{netip.AddrPortFrom(sfuIn, mediaPort)}, Conns: []*net.UDPConn{inSock, outSock}})
			if err != nil {
				return err
			}
			dp = d
			return d.Attach(testbed.ServerCliIface)
		}))
	} else {
		dp, err = NewUser(UserConfig{Conns: []*net.UDPConn{inSock, outSock}})
		testenv.Must(t, err)
	}
	t.Cleanup(func() { _ = dp.Close() })

	sender, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(clientIP, 0))
	testenv.Must(t, err)
	defer sender.Close()
	// The receivers' host is a known neighbour (as the agent's answers to its
	// connectivity checks would have made it).
	peerIface, err := ifaceIn(tb.Peer, testbed.PeerIface)
	testenv.Must(t, err)
	testenv.Must(t, tb.Server.IP("neigh", "replace", peerIP.String(), "lladdr", peerIface.HardwareAddr.String(),
		"dev", testbed.ServerPeerIface, "nud", "permanent"))
	var socks []*net.UDPConn
	var rcv []Receiver
	for range 3 {
		c, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(peerIP, 0))
		testenv.Must(t, err)
		defer c.Close()
		socks = append(socks, c)
		rcv = append(rcv, Receiver{From: netip.AddrPortFrom(sfuOut, mediaPort), To: c.LocalAddr().(*net.UDPAddr).AddrPort(), TTL: 64})
	}
	const ssrc, packets, fragmented = 0x5eed, 200, 10
	from := sender.LocalAddr().(*net.UDPAddr).AddrPort()
	testenv.Must(t, dp.SetStream(netip.AddrPortFrom(clientIP, from.Port()), audio(ssrc), rcv))
	sfu := net.UDPAddrFromAddrPort(netip.AddrPortFrom(sfuIn, mediaPort))
	var sent [][]byte
	for i := range packets {
		size := 100 + i%7 // odd lengths too
		if i >= packets-fragmented {
			size = 2500 // in fragments
		}
		p := rtpPacket(ssrc, uint16(i), size)
		sent = append(sent, p)
		if _, err := sender.WriteToUDP(p, sfu); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			time.Sleep(time.Millisecond) // bounded: 200 datagrams in about 10 ms
		}
	}
	for i, c := range socks {
		buf := make([]byte, 4096)
		for n := range packets {
			testenv.Must(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
			l, src, err := c.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("receiver %d: %d of %d datagrams, then %v", i, n, packets, err)
			}
			if src.AddrPort() != rcv[i].From || !bytes.Equal(buf[:l], sent[n]) {
				t.Fatalf("receiver %d, datagram %d: from %v, %d bytes; want from %v, the sender's %d bytes unchanged",
					i, n, src, l, rcv[i].From, len(sent[n]))
			}
		}
	}
	// The counters go up after the send: a receiver can read the last
	// replica before the plane has counted it (seen with another test
	// package on the other CPU). Wait for them, a bounded while.
	var st StreamStats
	var o map[Outcome]Counter
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		o, err = dp.Outcomes()
		testenv.Must(t, err)
		st, err = dp.StreamStats(netip.AddrPortFrom(clientIP, from.Port()))
		testenv.Must(t, err)
		counted := o[Replica].Packets >= 3*packets
		for _, c := range st.Out {
			counted = counted && c.Packets >= packets
		}
		if counted || time.Now().After(deadline) {
			break
		}
	}
	in, out := st.In, st.Out
	if in.Packets != packets || len(out) != len(rcv) {
		t.Errorf("stream stats: %d in, %d receivers", in.Packets, len(out))
	}
	for i, c := range out {
		if c.Packets != packets || c.Bytes != in.Bytes || c.To != rcv[i].To {
			t.Errorf("receiver %d: %+v out, %+v in", i, c, in)
		}
	}
	if d, ok := dp.(*DataPlane); ok {
		if slow := d.slow[Replicated].load().Packets; slow != fragmented {
			t.Errorf("the slow path forwarded %d datagrams, want the %d in fragments", slow, fragmented)
		}
	}
	if o[Replicated].Packets != packets || o[Replica].Packets != 3*packets || o[CloneFailed].Packets != 0 {
		t.Errorf("replicated %d, replicas %d; want %d and %d", o[Replicated].Packets, o[Replica].Packets, packets, 3*packets)
	}
}

func ifaceIn(ns *netns.NS, name string) (*net.Interface, error) {
	var ifi *net.Interface
	err := ns.Do(func() error {
		var err error
		ifi, err = net.InterfaceByName(name)
		return err
	})
	return ifi, err
}
