package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

const twccExt = 3

// twccPacket is RTP with a one-byte-header extension block: an element
// of pre data bytes (id 1), then the transport-wide sequence number
// (id twccExt) holding seq; pre 1 puts the number at an odd offset from
// the UDP header's start, pre 2 at an even one.
func twccPacket(ssrc uint32, seq, twcc uint16, pre, payloadLen int) []byte {
	h := rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: 3000 * uint32(seq), SSRC: ssrc,
		Extension: true, ExtensionProfile: 0xBEDE}
	if err := h.SetExtension(1, bytes.Repeat([]byte{0xaa}, pre)); err != nil {
		panic(err)
	}
	if err := h.SetExtension(twccExt, binary.BigEndian.AppendUint16(nil, twcc)); err != nil {
		panic(err)
	}
	p, err := (&rtp.Packet{Header: h, Payload: bytes.Repeat([]byte{byte(seq)}, payloadLen)}).Marshal()
	if err != nil {
		panic(err)
	}
	return p
}

// withTWCC is p with its transport-wide sequence number set to seq, as
// pion/rtp parses and writes it: the independent construction of a leg's
// replica.
func withTWCC(t *testing.T, p []byte, seq uint16) []byte {
	var pkt rtp.Packet
	testenv.Must(t, pkt.Unmarshal(bytes.Clone(p)))
	testenv.Must(t, pkt.SetExtension(twccExt, binary.BigEndian.AppendUint16(nil, seq)))
	b, err := pkt.Marshal()
	testenv.Must(t, err)
	return b
}

// Each leg with transport-wide numbers gets its own in its replicas, in
// sequence, the UDP checksum right (every frame built independently, the
// number at odd and even offsets); a leg without keeps what the headers
// held. Each number is logged with the replica's size and send time.
func TestTransportWideNumbersPerLeg(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	const ssrc = 0x7cc
	rcv := r.receivers(false, 4)
	rcv[0].TWCC, rcv[2].TWCC = true, true
	testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: ssrc, TWCCExt: twccExt}}, rcv))
	r.dp.twcc.leg(r.dp.streams[from].legs[2].twcc - 1).next.Store(65530) // across the wrap
	start := monoNow()
	for k := range 12 {
		payload := twccPacket(ssrc, uint16(100+k), 7777, 1+k%2, 50+k)
		in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: payload}.Marshal()
		ret, last, clones := r.run(in)
		if ret != tcActRedirect || len(clones) != 3 {
			t.Fatalf("packet %d: verdict %d, %d clones", k, ret, len(clones))
		}
		// Receiver 1 keeps receiver 0's number, receiver 3 receiver 2's:
		// the headers as the replica before left them.
		nums := []uint16{uint16(k), uint16(k), 65530 + uint16(k), 65530 + uint16(k)}
		for i, got := range append(clones, last) {
			requireFrame(t, fmt.Sprintf("packet %d, receiver %d", k, i), got, r.expected(i, rcv[i], withTWCC(t, payload, nums[i])))
		}
		for _, i := range []int{0, 2} {
			s, ok := r.leg(from, rcv[i].To).Sent(nums[i])
			if !ok || s.Size != len(payload) || s.At < start || s.At > monoNow() {
				t.Errorf("packet %d, receiver %d: logged %+v, %v; want %d bytes sent since %v", k, i, s, ok, len(payload), start)
			}
		}
	}
	if _, ok := r.leg(from, rcv[1].To).Sent(0); ok || r.leg(from, rcv[1].To).TWCC() {
		t.Error("a leg without transport-wide numbers has a log")
	}
}

// A leg's own packets (retransmissions, probes) take numbers from the same
// counter as its replicas, in both planes.
func TestLegSendTakesTheLegsNumbers(t *testing.T) {
	r := newRig(t)
	from := netip.MustParseAddrPort("10.20.0.5:61000")
	rcv := r.receivers(false, 1)
	rcv[0].TWCC = true
	testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: 1, TWCCExt: twccExt}}, rcv))
	leg := r.leg(from, rcv[0].To)
	p := twccPacket(1, 5, 0, 2, 10)
	off := twccOffset(p, len(p)-10, twccExt)
	if off == 0 {
		t.Fatal("no offset")
	}
	// No socket in the rig: sending fails, the number is taken and logged.
	_ = leg.Send(p, off)
	if got := binary.BigEndian.Uint16(p[off:]); got != 0 {
		t.Errorf("first number %d", got)
	}
	if s, ok := leg.Sent(0); !ok || s.Size != len(p) {
		t.Errorf("logged %+v %v", s, ok)
	}
	testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: 1, TWCCExt: twccExt}}, nil))
	if leg.Send(p, off) == nil || leg.SetTarget(0) == nil {
		t.Error("a removed leg still sends")
	}
}

// A packet from a sender whose SSRC the stream does not describe (yet)
// still has its transport-wide number logged, in both planes: the numbers
// are the transport's, and one left out would read as lost to the
// sender's estimate (padding on a simulcast encoding not learnt yet).
func TestUnknownSSRCArrivalsLogged(t *testing.T) {
	sources := []Source{{SSRC: 7, TWCCExt: twccExt}, {Video: VP8, TWCCExt: twccExt, Simulcast: &Simulcast{RIDExt: 4, RIDs: []string{"q", "f"}, SSRC: 0xabcdef}}}
	from := netip.MustParseAddrPort("10.20.0.5:61000")
	check := func(t *testing.T, plane Plane, handle func(p []byte)) {
		testenv.Must(t, plane.SetStream(from, sources, nil))
		log, err := plane.Arrivals(from)
		testenv.Must(t, err)
		handle(twccPacket(7, 1, 40, 2, 20))     // the audio: known
		handle(twccPacket(0x5eed, 9, 41, 1, 0)) // padding on an encoding not learnt
		handle(twccPacket(7, 2, 42, 2, 20))     // known again
		var got []uint16
		for _, a := range log.Read() {
			got = append(got, a.Seq)
		}
		if !slices.Equal(got, []uint16{40, 41, 42}) {
			t.Errorf("arrivals %v, want 40 41 42", got)
		}
	}
	t.Run("ebpf", func(t *testing.T) {
		r := newRig(t)
		c := r.slowPath(t, netip.AddrPortFrom(sfuV4, mediaPort))
		check(t, r.dp, func(p []byte) { r.dp.handle(c, p, from, newReplicaBatch(false)) })
	})
	t.Run("user", func(t *testing.T) {
		u, err := NewUser(UserConfig{Conns: []*net.UDPConn{testenv.LoopbackUDP(t)}})
		testenv.Must(t, err)
		t.Cleanup(func() { u.Close() })
		check(t, u, func(p []byte) { u.handle(nil, p, from, newReplicaBatch(false)) })
	})
}

// The history keeps a sender's packets as they go out: a NACKed one comes
// back byte for byte; the same packet again (a retransmission, a
// duplicate) goes to nobody and is counted; 512 numbers later its entry
// holds the newer packet; a packet too long to keep is forwarded and not
// kept.
func TestHistoryKeepsAndDeduplicates(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	const ssrc = 0x415
	rcv := r.receivers(false, 2)
	testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: ssrc, History: true}}, rcv))
	in := func(p []byte) []byte {
		return frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: p}.Marshal()
	}
	p7 := rtpPacket(ssrc, 7, 300)
	if ret := r.verdict(in(p7)); ret != tcActRedirect {
		t.Fatalf("verdict %d", ret)
	}
	if got, ok := r.dp.Packet(from, 7); !ok || !bytes.Equal(got, p7) {
		t.Fatalf("history: %v, same %v", ok, bytes.Equal(got, p7))
	}
	before := r.outcomes()
	ret, out, clones := r.run(in(p7))
	after := r.outcomes()
	if ret != tcActShot || len(clones) != 0 || after[Duplicate].Packets != before[Duplicate].Packets+1 ||
		after[Replica].Packets != before[Replica].Packets {
		t.Errorf("the packet again: verdict %d, %d clones, %d bytes out, duplicates %d -> %d", ret, len(clones), len(out),
			before[Duplicate].Packets, after[Duplicate].Packets)
	}
	// The same number 65,536 packets on is another packet (its timestamp).
	later := rtpPacket(ssrc, 7, 300)
	binary.BigEndian.PutUint32(later[4:], 12345)
	if ret := r.verdict(in(later)); ret != tcActRedirect {
		t.Errorf("a newer packet with the same number: verdict %d", ret)
	}
	p519 := rtpPacket(ssrc, 7+HistorySlots, 40)
	r.verdict(in(p519))
	if _, ok := r.dp.Packet(from, 7); ok {
		t.Error("packet 7 still kept after 519 took its entry")
	}
	if got, ok := r.dp.Packet(from, 7+HistorySlots); !ok || !bytes.Equal(got, p519) {
		t.Error("packet 519 not kept")
	}
	long := rtpPacket(ssrc, 8, historyData)
	r.verdict(in(long)) // no route at this length (MTU): the history still judged it
	if _, ok := r.dp.Packet(from, 8); ok {
		t.Errorf("a %d-byte packet kept", len(long))
	}
	testenv.Must(t, r.dp.RemoveStream(from))
	if _, ok := r.dp.Packet(from, 7+HistorySlots); ok {
		t.Error("history left after the stream went")
	}
	var k sfuHistoryKey
	if err := r.dp.objs.History.NextKey(nil, &k); err == nil {
		t.Errorf("history entries left: %+v", k)
	}
}

// The user plane keeps its history the same way, and stamps each leg's
// transport-wide numbers in its replicas (a leg without gets the sender's
// bytes).
func TestUserPlaneHistoryAndTransportWideNumbers(t *testing.T) {
	sfu, sender := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	rcv := []*net.UDPConn{testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)}
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}})
	testenv.Must(t, err)
	defer u.Close()
	const ssrc = 0x77
	testenv.Must(t, u.SetStream(addrOf(sender), []Source{{SSRC: ssrc, TWCCExt: twccExt, History: true}},
		[]Receiver{{From: addrOf(sfu), To: addrOf(rcv[0]), TWCC: true}, {From: addrOf(sfu), To: addrOf(rcv[1])}}))
	send := func(p []byte) {
		if _, err := sender.WriteToUDP(p, net.UDPAddrFromAddrPort(addrOf(sfu))); err != nil {
			t.Fatal(err)
		}
	}
	var sent [][]byte
	for k := range 5 {
		p := twccPacket(ssrc, uint16(40+k), 9999, 1+k%2, 30)
		sent = append(sent, p)
		send(p)
	}
	send(sent[2]) // a duplicate: nobody gets it
	for i, c := range rcv {
		for k, p := range sent {
			want := p
			if i == 0 {
				want = withTWCC(t, p, uint16(k))
			}
			buf := make([]byte, 1500)
			testenv.Must(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
			n, err := c.Read(buf)
			if err != nil || !bytes.Equal(buf[:n], want) {
				t.Fatalf("receiver %d, packet %d: %v\n got % x\nwant % x", i, k, err, buf[:n], want)
			}
		}
		testenv.Must(t, c.SetReadDeadline(time.Now().Add(100*time.Millisecond)))
		if n, err := c.Read(make([]byte, 1500)); err == nil {
			t.Errorf("receiver %d got a %d-byte duplicate", i, n)
		}
	}
	if got, ok := u.Packet(addrOf(sender), 42); !ok || !bytes.Equal(got, sent[2]) {
		t.Error("history: packet 42 not kept as sent")
	}
	o, _ := u.Outcomes()
	if o[Duplicate].Packets != 1 {
		t.Errorf("duplicates counted %d, want 1", o[Duplicate].Packets)
	}
	leg, err := u.Leg(addrOf(sender), addrOf(rcv[0]))
	testenv.Must(t, err)
	if s, ok := leg.Sent(4); !ok || s.Size != len(sent[4]) {
		t.Errorf("leg log: %+v %v", s, ok)
	}
}
