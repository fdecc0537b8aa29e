package afxdp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// pion's UDP mux reads and writes a Conn by netip.AddrPort, as it does a
// *net.UDPConn: no net.UDPAddr per datagram.
var _ ice.AddrPortReaderWriter = (*Conn)(nil)

// pionPeer is a pion/webrtc peer whose ICE runs on conn, closed when the test ends.
func pionPeer(t *testing.T, conn net.PacketConn, network webrtc.NetworkType) *webrtc.PeerConnection {
	t.Helper()
	pc, err := testbed.PionPeer(conn, network)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// TestPion has two pion/webrtc peers talk over the testbed: the one in the
// server namespace receives through AF_XDP (its UDP mux runs on a Conn),
// the other through a kernel socket. Every data channel message and RTP
// packet sent to the AF_XDP peer arrives, in order, through AF_XDP; a
// kernel socket on another port of the same host receives as before.
func TestPion(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	for _, tc := range []struct {
		name           string
		network        webrtc.NetworkType
		server, client netip.Addr
	}{
		{"IPv4", webrtc.NetworkTypeUDP4, testbed.ServerClientIP4, testbed.ClientIP4},
		{"IPv6", webrtc.NetworkTypeUDP6, testbed.ServerClientIP6, testbed.ClientIP6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			netw := "udp4"
			if tc.server.Is6() {
				netw = "udp6"
			}
			xc := listenIn(t, tb.Server, ListenConfig{}, netw, netip.AddrPortFrom(tc.server, 0).String())
			kc, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(tc.client, 0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { kc.Close() })
			other, err := testbed.ListenUDP(tb.Server, netip.AddrPortFrom(tc.server, 0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { other.Close() })

			receiver, sender := pionPeer(t, xc, tc.network), pionPeer(t, kc, tc.network)
			runPion(t, receiver, sender, xc, func() {
				// Other UDP on the host, during the call: the kernel's.
				sendN(t, tb.Client, netip.AddrPortFrom(tc.client, 0), other.LocalAddr().(*net.UDPAddr).AddrPort(), 100, 200)
				buf := make([]byte, 2048)
				for i := range 100 {
					other.SetReadDeadline(time.Now().Add(5 * time.Second))
					if n, _, err := other.ReadFromUDPAddrPort(buf); err != nil || binary.BigEndian.Uint32(buf[:n]) != uint32(i) {
						t.Fatalf("kernel socket on another port: datagram %d: %v", i, err)
					}
				}
			})
		})
	}
}

// runPion sends messages on a data channel and RTP packets from sender to
// receiver, checks that all arrive in order, and that AF_XDP carried them.
func runPion(t *testing.T, receiver, sender *webrtc.PeerConnection, xc *Conn, during func()) {
	const messages, packets = 2000, 1000
	ordered := true
	dc, err := sender.CreateDataChannel("data", &webrtc.DataChannelInit{Ordered: &ordered})
	if err != nil {
		t.Fatal(err)
	}
	track, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, "video", "afxdp")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sender.AddTrack(track); err != nil {
		t.Fatal(err)
	}
	msgs := make(chan int, messages)
	receiver.OnDataChannel(func(d *webrtc.DataChannel) {
		d.OnMessage(func(m webrtc.DataChannelMessage) { msgs <- int(binary.BigEndian.Uint32(m.Data)) })
	})
	seqs := make(chan uint16, packets)
	receiver.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		for {
			p, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			seqs <- p.SequenceNumber
		}
	})
	opened := make(chan struct{})
	dc.OnOpen(func() { close(opened) })
	if err := testbed.ConnectPeers(sender, receiver); err != nil {
		t.Fatal(err)
	}
	select {
	case <-opened:
	case <-time.After(20 * time.Second):
		t.Fatalf("data channel not open after 20 s (ICE %s)", receiver.ICEConnectionState())
	}

	payload := make([]byte, 1000)
	for i := range messages {
		binary.BigEndian.PutUint32(payload, uint32(i))
		if err := dc.Send(payload); err != nil {
			t.Fatal(err)
		}
		for dc.BufferedAmount() > 1<<20 {
			time.Sleep(time.Millisecond)
		}
	}
	const firstSeq = 65000 // wraps during the run
	for i := range packets {
		p := rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(firstSeq + i), Timestamp: uint32(i * 3000)}, Payload: payload[:800]}
		if err := track.WriteRTP(&p); err != nil {
			t.Fatal(err)
		}
		if i%20 == 19 {
			time.Sleep(time.Millisecond)
		}
	}
	during()
	for i := range messages {
		select {
		case got := <-msgs:
			if got != i {
				t.Fatalf("data channel: message %d arrived as number %d", got, i)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("data channel: %d of %d messages arrived", i, messages)
		}
	}
	var got []uint16
	for i := range packets {
		select {
		case seq := <-seqs:
			got = append(got, seq)
		case <-time.After(10 * time.Second):
			t.Fatalf("RTP: %d of %d packets arrived", i, packets)
		}
	}
	st, err := xc.Stats()
	if err != nil {
		t.Fatal(err)
	}
	// In order, unless one took the kernel socket (see below), which keeps
	// no order with the AF_XDP path: then each once.
	for i, seq := range got {
		if want := uint16(firstSeq + i); seq != want && st.ViaKernel == 0 {
			t.Fatalf("RTP: packet %d has sequence number %d, want %d", i, seq, want)
		}
	}
	if n := len(slices.Compact(slices.Sorted(slices.Values(got)))); n != packets {
		t.Fatalf("RTP: %d distinct sequence numbers of %d", n, packets)
	}
	t.Logf("AF_XDP conn: %+v", st)
	// Via the kernel socket only what looks like a partial checksum: a
	// full one equal to the pseudo-header sum by chance (1 in 65,536;
	// bpf/udp.h) is taken for one, and the kernel judges it.
	partial := st.Outcomes["fallback_partial_checksum"].Packets
	if min := uint64(messages + packets); st.ViaXDP+st.ViaKernel < min || st.ViaKernel != partial || partial > 3 {
		t.Errorf("%d datagrams via AF_XDP, %d via the kernel socket (want at least %d in all, the kernel's only the %d partial-looking, at most 3)",
			st.ViaXDP, st.ViaKernel, min, partial)
	}
	if st.BadChecksum+st.Malformed > 0 {
		t.Errorf("bad checksums %d, malformed %d", st.BadChecksum, st.Malformed)
	}
	// The peer's own sends (ICE, DTLS, SCTP's acknowledgements, RTCP) are
	// WriteTo calls: through the TX ring but for a neighbour being
	// resolved or confirmed by the kernel.
	if st.Sent.ViaXDP < 10 {
		t.Errorf("the peer sent %d datagrams through the TX ring, want its acknowledgements there: %+v", st.Sent.ViaXDP, st.Sent)
	}
	for why := range st.Sent.ViaKernel {
		if why != "neighbour" && why != "confirm" {
			t.Errorf("the peer sent through the kernel socket for %q: %+v", why, st.Sent)
		}
	}
}
