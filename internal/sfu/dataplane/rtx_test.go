package dataplane

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"slices"
	"testing"

	"github.com/pion/rtp"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

const (
	rtxPT   = 97
	mediaPT = 96
	rridExt = 5

	rtxSSRC  = 0x7e7e
	camSSRC  = 0xca11
	highSSRC = 0x4141
)

// rtpWith is an RTP packet built by pion/rtp: its header extensions
// (id, value) in order, its payload, and padding bytes (0: none).
func rtxTestPacket(t *testing.T, pt uint8, ssrc uint32, seq uint16, marker bool, exts [][2][]byte, payload []byte, padding byte) []byte {
	t.Helper()
	h := rtp.Header{Version: 2, PayloadType: pt, SequenceNumber: seq, Timestamp: 90000, SSRC: ssrc, Marker: marker}
	for _, e := range exts {
		testenv.Must(t, h.SetExtension(e[0][0], e[1]))
	}
	if padding > 0 {
		h.Padding, h.PaddingSize = true, padding
	}
	p, err := (&rtp.Packet{Header: h, Payload: payload}).Marshal()
	testenv.Must(t, err)
	return p
}

func ext(id uint8, v []byte) [2][]byte { return [2][]byte{{id}, v} }

// A retransmission (RFC 4588) turned back into the packet it repairs:
// the media SSRC (by the RTX SSRC, or a simulcast encoding's by its
// repaired stream id), the original sequence number and payload type,
// the retransmission's own header extensions (its transport-wide number
// is this arrival's), the padding gone; built independently with
// pion/rtp. Padding alone, another payload type, an encoding not learnt
// or a bad padding length repair nothing.
func TestRepairedPacket(t *testing.T) {
	payload := []byte("a VP8 frame's first packet, say")
	osn := binary.BigEndian.AppendUint16(nil, 4242)
	camera := []Source{{SSRC: 1}, {SSRC: camSSRC, Video: VP8, TWCCExt: twccExt, RTX: &RTX{PT: rtxPT, MediaPT: mediaPT, SSRC: rtxSSRC}}}
	sim := &Simulcast{RIDExt: ridExt, RIDs: []string{"q", "f"}, SSRC: 0xabc}
	simRTX := &RTX{PT: rtxPT, MediaPT: mediaPT, RRIDExt: rridExt}
	simulcast := []Source{{Video: VP8, TWCCExt: twccExt, Simulcast: sim, RTX: simRTX},
		{SSRC: 0x1010, Video: VP8, TWCCExt: twccExt, Simulcast: sim, RTX: simRTX, Encoding: 0},
		{SSRC: highSSRC, Video: VP8, TWCCExt: twccExt, Simulcast: sim, RTX: simRTX, Encoding: 1}}
	twcc := ext(twccExt, []byte{0x01, 0x2c})
	for _, c := range []struct {
		name    string
		sources []Source
		in      []byte
		want    []byte // nil: nothing repaired
	}{
		{"by SSRC", camera, rtxTestPacket(t, rtxPT, rtxSSRC, 77, true, [][2][]byte{twcc}, append(osn, payload...), 0),
			rtxTestPacket(t, mediaPT, camSSRC, 4242, true, [][2][]byte{twcc}, payload, 0)},
		{"padded", camera, rtxTestPacket(t, rtxPT, rtxSSRC, 78, false, [][2][]byte{twcc}, append(osn, payload...), 7),
			rtxTestPacket(t, mediaPT, camSSRC, 4242, false, [][2][]byte{twcc}, payload, 0)},
		{"by repaired stream id", simulcast, rtxTestPacket(t, rtxPT, 0x9999, 5, false, [][2][]byte{twcc, ext(rridExt, []byte("f"))}, append(osn, payload...), 0),
			rtxTestPacket(t, mediaPT, highSSRC, 4242, false, [][2][]byte{twcc, ext(rridExt, []byte("f"))}, payload, 0)},
		{"padding only", camera, rtxTestPacket(t, rtxPT, rtxSSRC, 79, false, [][2][]byte{twcc}, nil, 200), nil},
		{"a probe's SSRC 0", camera, rtxTestPacket(t, rtxPT, 0, 1, false, [][2][]byte{twcc}, nil, 200), nil},
		{"another payload type", camera, rtxTestPacket(t, mediaPT, rtxSSRC, 80, false, [][2][]byte{twcc}, append(osn, payload...), 0), nil},
		{"an encoding not learnt", simulcast[:2], rtxTestPacket(t, rtxPT, 0x9999, 6, false, [][2][]byte{twcc, ext(rridExt, []byte("f"))}, append(osn, payload...), 0), nil},
		{"no repaired stream id", simulcast, rtxTestPacket(t, rtxPT, 0x9999, 7, false, [][2][]byte{twcc}, append(osn, payload...), 0), nil},
	} {
		got, cl, why := repairedPacket(c.sources, c.in, Classify(c.in), nil)
		ok := why == Replicated
		if ok != (c.want != nil) || !bytes.Equal(got, c.want) {
			t.Errorf("%s: repaired %v\n got %x\nwant %x", c.name, ok, got, c.want)
			continue
		}
		if ok && (cl.SSRC != binary.BigEndian.Uint32(c.want[8:]) || !bytes.Equal(cl.Payload, payload)) {
			t.Errorf("%s: classified SSRC %x, payload %q", c.name, cl.SSRC, cl.Payload)
		}
	}
	bad := rtxTestPacket(t, rtxPT, rtxSSRC, 81, false, nil, append(osn, payload...), 4)
	bad[len(bad)-1] = byte(len(payload) + 10) // more padding than payload
	if _, _, why := repairedPacket(camera, bad, Classify(bad), nil); why == Replicated {
		t.Error("a padding length past the payload repaired a packet")
	}
}

// On both planes' user-space paths (the eBPF plane's RTX reaches its slow
// path: the program knows no RTX SSRC): a retransmission of a packet that
// never came is forwarded as that packet (the history keeps it, byte for
// byte the original); one of a packet that came is a duplicate (a probe's
// old packet) and goes to nobody; padding on the RTX SSRC, and on SSRC 0
// (libwebrtc's probes before media), is no media; every transport-wide
// number is logged as an arrival, the duplicate's too.
func TestRTXRepairsAndProbes(t *testing.T) {
	from := netip.MustParseAddrPort("10.20.0.5:61000")
	sources := []Source{{SSRC: camSSRC, Video: VP8, TWCCExt: twccExt, History: true, RTX: &RTX{PT: rtxPT, MediaPT: mediaPT, SSRC: rtxSSRC}}}
	twcc := func(n uint16) [2][]byte { return ext(twccExt, binary.BigEndian.AppendUint16(nil, n)) }
	payload := func(seq uint16) []byte { return bytes.Repeat([]byte{byte(seq)}, 40) }
	media := func(seq, n uint16) []byte {
		return rtxTestPacket(t, mediaPT, camSSRC, seq, false, [][2][]byte{twcc(n)}, payload(seq), 0)
	}
	rtx := func(rseq, seq, n uint16) []byte {
		return rtxTestPacket(t, rtxPT, rtxSSRC, rseq, false, [][2][]byte{twcc(n)}, append(binary.BigEndian.AppendUint16(nil, seq), payload(seq)...), 0)
	}
	check := func(t *testing.T, plane Plane, handle func(p []byte), outcomes func() map[Outcome]Counter, kept func(seq uint16) ([]byte, bool)) {
		testenv.Must(t, plane.SetStream(from, sources, nil))
		log, err := plane.Arrivals(from)
		testenv.Must(t, err)
		handle(media(10, 100))
		handle(media(12, 101)) // 11 lost on the way
		before := outcomes()
		handle(rtx(1, 11, 102)) // the repair
		if got, ok := kept(11); !ok || !bytes.Equal(got, media(11, 102)) {
			t.Errorf("the repaired packet 11: kept %v\n got %x\nwant %x", ok, got, media(11, 102))
		}
		handle(rtx(2, 10, 103)) // a probe's old packet
		handle(rtxTestPacket(t, rtxPT, rtxSSRC, 3, false, [][2][]byte{twcc(104)}, nil, 224))
		handle(rtxTestPacket(t, rtxPT, 0, 1, false, [][2][]byte{twcc(105)}, nil, 224))
		after := outcomes()
		if d := after[Duplicate].Packets - before[Duplicate].Packets; d != 1 {
			t.Errorf("%d duplicates, want 1 (the probe's packet 10)", d)
		}
		if d := after[Probe].Packets - before[Probe].Packets; d != 2 || after[UnknownSender] != before[UnknownSender] {
			t.Errorf("%d probes, want 2 (the paddings); unknown_sender %d -> %d", d, before[UnknownSender].Packets, after[UnknownSender].Packets)
		}
		var got []uint16
		for _, a := range log.Read() {
			got = append(got, a.Seq)
		}
		if want := []uint16{100, 101, 102, 103, 104, 105}; !slices.Equal(got, want) {
			t.Errorf("arrivals %v, want %v", got, want)
		}
	}
	t.Run("ebpf", func(t *testing.T) {
		r := newRig(t)
		c := r.slowPath(t, netip.AddrPortFrom(sfuV4, mediaPort))
		check(t, r.dp, func(p []byte) { r.dp.handle(c, p, from, newReplicaBatch(false)) },
			func() map[Outcome]Counter { return r.dp.SlowPath() },
			func(seq uint16) ([]byte, bool) { return r.dp.Packet(from, seq) })
	})
	t.Run("user", func(t *testing.T) {
		u, err := NewUser(UserConfig{Conns: []*net.UDPConn{testenv.LoopbackUDP(t)}})
		testenv.Must(t, err)
		t.Cleanup(func() { u.Close() })
		check(t, u, func(p []byte) { u.handle(nil, p, from, newReplicaBatch(false)) },
			func() map[Outcome]Counter { o, err := u.Outcomes(); testenv.Must(t, err); return o },
			func(seq uint16) ([]byte, bool) { return u.Packet(from, seq) })
	})
}

// The program logs a duplicate's transport-wide number as an arrival (a
// probe's old packet sent again, a repair that came late) before it drops
// it: one left out of the feedback reads as lost to the sender.
func TestDuplicateArrivalLogged(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: camSSRC, Video: VP8, TWCCExt: twccExt, History: true}}, r.receivers(false, 1)))
	log, err := r.dp.Arrivals(from)
	testenv.Must(t, err)
	in := func(p []byte) []byte {
		return frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: p}.Marshal()
	}
	first, again := twccPacket(camSSRC, 7, 300, 1, 40), twccPacket(camSSRC, 7, 301, 1, 40)
	r.verdict(in(first))
	if ret := r.verdict(in(again)); ret != tcActShot {
		t.Errorf("the duplicate: verdict %d, want dropped", ret)
	}
	var got []uint16
	for _, a := range log.Read() {
		got = append(got, a.Seq)
	}
	if !slices.Equal(got, []uint16{300, 301}) {
		t.Errorf("arrivals %v, want 300 301", got)
	}
}

// SSRC 0 (libwebrtc's first probes, padding before any media) is no
// source, not a simulcast video's stand-in: counted as a probe, its
// transport-wide number logged, on both planes; media on an SSRC nobody
// described stays an unknown sender's.
func TestSSRCZeroIsNoSource(t *testing.T) {
	from := netip.MustParseAddrPort("10.20.0.5:61000")
	sources := []Source{{Video: VP8, TWCCExt: twccExt, Simulcast: &Simulcast{RIDExt: ridExt, RIDs: []string{"q", "f"}, SSRC: 0xabcdef}}}
	probe := rtxTestPacket(t, rtxPT, 0, 1, false, [][2][]byte{ext(twccExt, []byte{0, 77})}, nil, 224)
	check := func(t *testing.T, plane Plane, handle func(p []byte), outcomes func() map[Outcome]Counter) {
		testenv.Must(t, plane.SetStream(from, sources, nil))
		log, err := plane.Arrivals(from)
		testenv.Must(t, err)
		before := outcomes()
		handle(probe)
		handle(twccPacket(0x5eed, 9, 78, 1, 40)) // media, no stream id
		after := outcomes()
		if after[Probe].Packets != before[Probe].Packets+1 || after[UnknownSender].Packets != before[UnknownSender].Packets+1 ||
			after[NoReceivers] != before[NoReceivers] {
			t.Errorf("probe %d -> %d, unknown_sender %d -> %d, no_receivers %d -> %d (forwarded as the stand-in's)", before[Probe].Packets,
				after[Probe].Packets, before[UnknownSender].Packets, after[UnknownSender].Packets, before[NoReceivers].Packets, after[NoReceivers].Packets)
		}
		if got := log.Read(); len(got) != 2 || got[0].Seq != 77 || got[1].Seq != 78 {
			t.Errorf("arrivals %+v, want 77 78", got)
		}
	}
	t.Run("ebpf", func(t *testing.T) {
		r := newRig(t)
		c := r.slowPath(t, netip.AddrPortFrom(sfuV4, mediaPort))
		check(t, r.dp, func(p []byte) { r.dp.handle(c, p, from, newReplicaBatch(false)) },
			func() map[Outcome]Counter { return r.dp.SlowPath() })
	})
	t.Run("user", func(t *testing.T) {
		u, err := NewUser(UserConfig{Conns: []*net.UDPConn{testenv.LoopbackUDP(t)}})
		testenv.Must(t, err)
		t.Cleanup(func() { u.Close() })
		check(t, u, func(p []byte) { u.handle(nil, p, from, newReplicaBatch(false)) },
			func() map[Outcome]Counter { o, err := u.Outcomes(); testenv.Must(t, err); return o })
	})
}
