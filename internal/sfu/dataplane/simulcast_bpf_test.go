package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/netorder"
	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// simReference is the Go reference of the eBPF plane's simulcast: each
// encoding's templates and liveness, each receiver's layers.Replica
// (DecideEncoding), the replicas rewritten by rewriteEncoding.
type simReference struct {
	sim       *Simulcast
	codec     Codec
	templates [layers.MaxEncodings]sfuLayerTemplates
	lastAt    [layers.MaxEncodings]uint64
	replicas  []layers.Replica
}

// simWant is what one receiver is to get of a packet: nothing, a replica
// (payload, its RTP timestamp apart) or padding under a number.
type simWant struct {
	payload  []byte // nil: nothing
	padding  bool
	switched bool // the receiver moved to the packet's encoding with it
}

// step is the reference's decision on packet p of encoding enc for
// receivers whose targets (as the data plane holds them) are targets.
func (ref *simReference) step(p []byte, enc uint8, targets []uint8, now uint64) []simWant {
	cl := Classify(p)
	hdr := len(p) - len(cl.Payload)
	out := make([]simWant, len(targets))
	if cl.Payload == nil { // a sender report
		for i := range targets {
			if r := &ref.replicas[i]; r.Sim.Encoding == enc {
				rp := bytes.Clone(p)
				rewriteReport(rp, ref.sim, r.Sim.Shift)
				out[i].payload = rp
			}
		}
		return out
	}
	padding := paddingOnly(p, cl.Payload)
	var at rewriteAt
	if off, n := rtpExtensionAt(p, hdr, ddExt); n >= 3 && !padding {
		at.dd = off
	}
	key := KeyFrameStart(ref.codec, cl.Payload)
	var f layers.Frame
	switch {
	case padding:
		f.Packet.Seq, f.Packet.Padding = binary.BigEndian.Uint16(p[2:]), true
	case at.dd > 0:
		ref.lastAt[enc] = now
		var structure []byte
		f, _, structure = frameOf(p, hdr, ddExt, &ref.templates[enc])
		if structure != nil {
			if d, err := dd.Parse(structure, nil); err == nil && d.Structure != nil {
				ref.templates[enc] = templatesOf(d.Structure)
			}
		}
		f.Key = key
	default:
		ref.lastAt[enc] = now
		f.Packet.Seq, f.Packet.Start, f.Packet.End, f.Key = binary.BigEndian.Uint16(p[2:]), key, p[1]&0x80 != 0, key
	}
	if ref.codec == VP8 && !padding {
		at.vp8, f.VP8 = hdr, VP8PicturesOf(cl.Payload)
	}
	top := topOf(&ref.lastAt, now)
	for i, target := range targets {
		r := &ref.replicas[i]
		before := r.Sim.Encoding
		n, v := r.DecideEncoding(&f, enc, binary.BigEndian.Uint32(p[4:]), target, top, now)
		out[i].switched = r.Sim.Encoding != before
		switch v {
		case layers.Send:
			out[i].payload = bytes.Clone(p)
			rewriteEncoding(out[i].payload, ref.sim, n, at)
		case layers.Padding:
			out[i].payload, out[i].padding = PaddingPacket(p, n.Seq), true
			binary.BigEndian.PutUint32(out[i].payload[4:], n.TS)
			binary.BigEndian.PutUint32(out[i].payload[8:], ref.sim.SSRC)
		}
	}
	return out
}

// simCollect is what each receiver got of one packet: the UDP payload of
// its replica (checksums verified by an independent parse) or its padding
// packet, nil for nothing. last is the program's own output, if any.
func (r *rig) simCollect(t *testing.T, fd int, rcv []Receiver, padded chan paddedPacket, expect int, last []byte) ([][]byte, []bool) {
	t.Helper()
	got, pads := make([][]byte, len(rcv)), make([]bool, len(rcv))
	seen := 0
	record := func(b []byte) {
		seen++
		u, err := frame.Parse(b)
		if err != nil {
			t.Fatalf("replica does not parse: %v", err)
		}
		for i, rc := range rcv {
			if u.Dst == rc.To {
				got[i] = bytes.Clone(u.Payload)
			}
		}
	}
	if last != nil {
		record(last)
	}
	buf := make([]byte, 4096)
	for deadline := time.Now().Add(time.Second); seen < expect && time.Now().Before(deadline); {
		select {
		case p := <-padded:
			seen++
			for i, rc := range rcv {
				if rc.To == p.to {
					got[i], pads[i] = p.p, true
				}
			}
			continue
		default:
		}
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EAGAIN {
			time.Sleep(time.Millisecond)
			continue
		}
		testenv.Must(t, err)
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if _, err := frame.Parse(buf[:n]); err == nil {
			record(buf[:n])
		}
	}
	return got, pads
}

type paddedPacket struct {
	to netip.AddrPort
	p  []byte
}

// simTargets are the receivers' flat targets at round k (EveryLayer,
// Paused, or a target of the layout: q's three, then h, then f): one
// never adapted, one low then higher, one moved across every encoding and
// paused, one moved up.
func simTargets(k int) []int {
	r2 := 4
	switch {
	case k >= 50:
	case k >= 45:
		r2 = Paused
	case k >= 30:
		r2 = 1
	case k >= 15:
		r2 = 3
	}
	return []int{EveryLayer, map[bool]int{true: 0, false: 2}[k < 20], r2, map[bool]int{true: 2, false: 4}[k < 10]}
}

// The eBPF plane's simulcast is the Go reference's, packet for packet: a
// video of three encodings (q, h, f; with dependency descriptors, and
// without as Firefox's VP8 sends) with losses, reordering, probes and
// sender reports (a late frame of a layer a receiver does not get goes to
// it as padding), f stopping for two seconds and coming back, receivers
// at every kind of target and moved across encodings. Each encoding's
// SSRC is learnt by the slow path from its stream id; every third packet
// goes through the slow path (the same state, under the same claim).
// Every replica is the reference's byte for byte (checksums verified by
// an independent parse) but for its RTP timestamp, whose shift at a switch
// measures the time since the last packet sent on each side's own clock:
// it may differ there by a few milliseconds, and must then stay the same.
//
// VP8 (as Firefox sends it, without descriptors, and as Chromium does,
// with them): each encoding numbers its pictures from a start of its own,
// and every receiver's, checked apart from the reference, go on across
// each switch (PictureID and TL0PICIDX one up from the last it got).
func TestSimulcastAgreesWithBPF(t *testing.T) {
	for _, c := range []struct {
		name      string
		noDD, vp8 bool
	}{{"described", false, false}, {"undescribed", true, false}, {"vp8", true, true}, {"vp8-described", false, true}} {
		t.Run(c.name, func(t *testing.T) { simulcastAgrees(t, c.noDD, c.vp8) })
	}
}

// vp8Received is what a receiver got last of a VP8 stream's numbering:
// the sequence number of its latest packet, and each field as the latest
// packet carrying it had it.
type vp8Received struct {
	seq  uint16
	pics layers.VP8
	have bool
}

// check holds p, a replica the receiver got, to the numbering before it,
// apart from the reference: at a switch (the new encoding's key frame)
// each field it carries one up from the last the receiver got; else the
// picture the latest one's or after it, by no more than a late frame
// leaves (within).
func (v *vp8Received) check(p []byte, switched bool, within uint16) error {
	cl := Classify(p)
	if cl.Payload == nil || paddingOnly(p, cl.Payload) {
		return nil
	}
	d := cl.Payload
	x := d[1]
	got := layers.VP8{Picture: binary.BigEndian.Uint16(d[2:]) & 0x7fff}
	tail := d[4:]
	if x&0x40 != 0 {
		got.TL0, tail = tail[0], tail[1:]
	}
	if x&0x10 != 0 {
		got.KeyIdx = tail[0] & 0x1f
	}
	seq, newest := binary.BigEndian.Uint16(p[2:]), !v.have || int16(binary.BigEndian.Uint16(p[2:])-v.seq) > 0
	switch {
	case !v.have:
	case switched && got.Picture != (v.pics.Picture+1)&0x7fff:
		return fmt.Errorf("after a switch: picture %d after %d", got.Picture, v.pics.Picture)
	case switched && x&0x40 != 0 && v.pics.Fields&layers.VP8TL0 != 0 && got.TL0 != v.pics.TL0+1:
		return fmt.Errorf("after a switch: TL0PICIDX %d after %d", got.TL0, v.pics.TL0)
	case switched && x&0x10 != 0 && v.pics.Fields&layers.VP8KeyIdx != 0 && got.KeyIdx != (v.pics.KeyIdx+1)&0x1f:
		return fmt.Errorf("after a switch: KEYIDX %d after %d", got.KeyIdx, v.pics.KeyIdx)
	case !switched && newest && (got.Picture-v.pics.Picture)&0x7fff > within:
		return fmt.Errorf("picture %d after %d", got.Picture, v.pics.Picture)
	}
	if newest {
		v.seq, v.have, v.pics.Picture = seq, true, got.Picture
		if x&0x40 != 0 {
			v.pics.TL0, v.pics.Fields = got.TL0, v.pics.Fields|layers.VP8TL0
		}
		if x&0x10 != 0 {
			v.pics.KeyIdx, v.pics.Fields = got.KeyIdx, v.pics.Fields|layers.VP8KeyIdx
		}
	}
	return nil
}

func simulcastAgrees(t *testing.T, noDD, vp8 bool) {
	r := newRig(t)
	padded := make(chan paddedPacket, 64)
	r.dp.sendPadding = func(p []byte, _, to netip.AddrPort) error {
		padded <- paddedPacket{to, bytes.Clone(p)}
		return nil
	}
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	slowConn := r.slowPath(t, sfu)
	sim := &Simulcast{RIDExt: ridExt, RIDs: []string{"q", "h", "f"}, SSRC: 0x5151}
	rcv := r.receivers(false, 4)
	codec := map[bool]Codec{false: AV1, true: VP8}[vp8]
	testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: 7}, {Video: codec, DDExt: ddExt, History: true, Simulcast: sim}}, rcv))
	encs := []*simulcastEncoding{
		// (VP8: I alone as Firefox sends it, I L T as Chromium does, and I T K.)
		{index: 0, rid: "q", ssrc: 1111, seq: 65300, frame: 30000, ts: 5000, keyEvery: 10, noDD: noDD, vp8: vp8, picture: 32700, tl0: 250, keyIdx: 31, vp8Fields: 0x80},
		{index: 1, rid: "h", ssrc: 2222, seq: 100, frame: 65500, ts: 4e9, keyEvery: 12, noDD: noDD, vp8: vp8, picture: 5, tl0: 3, vp8Fields: 0xe0},
		{index: 2, rid: "f", ssrc: 3333, seq: 40000, frame: 7, ts: 77, keyEvery: 15, noDD: noDD, vp8: vp8, picture: 20000, tl0: 128, keyIdx: 17, vp8Fields: 0xb0},
	}
	ref := &simReference{sim: sim, codec: codec, replicas: make([]layers.Replica, len(rcv))}
	received := make([]vp8Received, len(rcv))
	for i := range ref.replicas {
		ref.replicas[i] = layers.NewReplica()
	}
	fd := r.capture(t)
	batch := newReplicaBatch(false)
	learnt := map[uint32]bool{}
	delta := make([]uint32, len(rcv)) // each receiver's timestamp, BPF's less the reference's
	var stats struct{ sent, padding, switches, reports, slow, mismatches int }
	k := 0
	play := func(p []byte, enc uint8) {
		var targets []uint8
		for i := range rcv {
			target, ok := r.dp.streams[from].legs[i].target()
			if !ok {
				t.Fatal("no target")
			}
			targets = append(targets, target)
		}
		want := ref.step(p, enc, targets, coarseNow())
		expect := 0
		for _, w := range want {
			if w.payload != nil {
				expect++
			}
		}
		ssrc := binary.BigEndian.Uint32(p[8:])
		if Classify(p).Payload == nil {
			ssrc = binary.BigEndian.Uint32(p[4:])
		}
		var got [][]byte
		var pads []bool
		if !learnt[ssrc] || k%3 == 0 {
			r.dp.handle(slowConn, p, from, batch)
			got, pads = r.simCollect(t, fd, rcv, padded, expect, nil)
			learnt[ssrc] = true
			stats.slow++
		} else {
			in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: p}.Marshal()
			ret, last, _ := r.runOn(r.in, in, false)
			if ret != tcActRedirect {
				last = nil
			}
			got, pads = r.simCollect(t, fd, rcv, padded, expect, last)
		}
		k++
		if !noDD && Classify(p).Payload != nil {
			r.awaitEncodingTemplates(t, from, enc, ref.templates[enc])
		}
		for i, w := range want {
			err := simCompare(w, got[i], pads[i], &delta[i])
			if err == nil && vp8 && got[i] != nil && !pads[i] {
				err = received[i].check(got[i], w.switched, map[bool]uint16{true: 2, false: 8}[noDD])
			}
			if err != nil {
				if stats.mismatches++; stats.mismatches < 10 {
					t.Errorf("packet %d (SSRC %d seq %d), receiver %d (target %#x): %v", k, ssrc, binary.BigEndian.Uint16(p[2:]), i, targets[i], err)
				}
			}
			switch {
			case w.payload == nil:
			case w.padding:
				stats.padding++
			case Classify(p).Payload == nil:
				stats.reports++
			default:
				stats.sent++
			}
			if w.switched {
				stats.switches++
			}
		}
	}
	var held []byte // a packet sent after the next one (reordered)
	var lateFrame [][]byte
	heldEnc := uint8(0)
	for round := range 60 {
		for i, target := range simTargets(round) {
			testenv.Must(t, r.leg(from, rcv[i].To).SetTarget(target))
		}
		if round == 40 {
			time.Sleep(time.Duration(liveFor) + 300*time.Millisecond) // f stops: its receivers move to h
		}
		for _, e := range encs {
			if e.index == 2 && round >= 40 && round < 48 {
				continue
			}
			if round%7 == 3 && e.index == 1 {
				play(e.probe(t), e.index)
			}
			pkts := e.nextFrame(t)
			if e.index == 0 && round%9 == 4 { // a whole frame of q late, after q's next
				lateFrame, pkts = pkts, nil
			}
			for j, p := range pkts {
				switch n := round*6 + int(e.index)*2 + j; {
				case n%29 == 11: // lost
				case n%31 == 5 && j == 0:
					held, heldEnc = p, e.index
				default:
					play(p, e.index)
					if held != nil {
						play(held, heldEnc)
						held = nil
					}
				}
			}
			if e.index == 0 && round%9 == 5 {
				for _, p := range lateFrame {
					play(p, 0)
				}
			}
			if round%5 == 4 {
				sr := senderSR(e.ssrc)
				binary.BigEndian.PutUint32(sr[16:], e.ts-3000)
				play(sr, e.index)
			}
		}
	}
	t.Logf("%d packets (%d by the slow path): %d replicas, %d padding, %d reports, %d switches; %d mismatches",
		k, stats.slow, stats.sent, stats.padding, stats.reports, stats.switches, stats.mismatches)
	if stats.switches < 8 || stats.reports == 0 || stats.sent < 200 || (!noDD && stats.padding == 0) {
		t.Error("the streams do not exercise switching and sender reports")
	}
	if o := r.outcomes(); o[UnknownSender].Packets != 0 || o[OtherEncoding].Packets == 0 {
		t.Errorf("outcomes %v: want other encodings counted, no unknown sender", o)
	}
	ls, err := r.dp.Layers(from)
	if err != nil || len(ls.Encodings) != 3 || ls.Encodings[2].SSRC != 3333 {
		t.Errorf("layers %+v, %v: want three encodings", ls, err)
	}
}

// simCompare holds what a receiver got to what the reference wants of it;
// delta is the receiver's timestamp difference, taken anew at a switch.
func simCompare(w simWant, got []byte, padding bool, delta *uint32) error {
	switch {
	case w.payload == nil && got == nil:
		return nil
	case w.payload == nil || got == nil || padding != w.padding || len(got) != len(w.payload):
		return fmt.Errorf("got % x (padding %v), want % x (padding %v)", head(got), padding, head(w.payload), w.padding)
	}
	tsAt := 4
	if got[1] == 200 {
		tsAt = 16
	}
	d := binary.BigEndian.Uint32(got[tsAt:]) - binary.BigEndian.Uint32(w.payload[tsAt:])
	if w.switched {
		*delta = d
	}
	if int32(*delta) < -2700 || int32(*delta) > 2700 || d != *delta {
		return fmt.Errorf("timestamp %d more than the reference's: want %d (within 30 ms)", int32(d), int32(*delta))
	}
	binary.BigEndian.PutUint32(got[tsAt:], binary.BigEndian.Uint32(w.payload[tsAt:]))
	if !bytes.Equal(got, w.payload) {
		return fmt.Errorf("got % x, want % x", head(got), head(w.payload))
	}
	return nil
}

func head(b []byte) []byte { return b[:min(len(b), 24)] }

// awaitEncodingTemplates waits until the data plane holds the templates
// the Go reference installed for encoding enc.
func (r *rig) awaitEncodingTemplates(t *testing.T, from netip.AddrPort, enc uint8, want sfuLayerTemplates) {
	t.Helper()
	for range 200 {
		r.dp.mu.Lock()
		slot, owned := r.dp.streams[from].enc[enc].slot, enc == 0 || r.dp.streams[from].enc[enc].owned
		r.dp.mu.Unlock()
		var have sfuLayerTemplates
		if owned && r.dp.objs.SenderTemplates.Lookup(slot, &have) == nil && have == want {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the data plane did not install encoding %d's templates", enc)
}

// BenchmarkProgramReplicas is the program's cost per replica of one
// video packet to 16 receivers (BPF_PROG_TEST_RUN, the replicas cloned out
// of a veth): as the sender sent it, renumbered for a decode target, and
// a simulcast encoding's (rewritten: SSRC, timestamp, frame and sequence
// numbers; simulcast-vp8: a VP8 encoding's, its picture numbering too).
// Compare the cases within one run.
//
//	sudo go test -run '^$' -bench BenchmarkProgramReplicas -benchtime 100000x ./internal/sfu/dataplane
func BenchmarkProgramReplicas(b *testing.B) {
	for _, c := range []string{"as-sent", "renumbered", "simulcast", "simulcast-vp8"} {
		b.Run(c, func(b *testing.B) { programReplicas(b, c) })
	}
}

func programReplicas(b *testing.B, kind string) {
	const receivers = 16
	r := newRig(b)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	slowConn := r.slowPath(b, sfu)
	rcv := r.receivers(false, receivers)
	enc := &simulcastEncoding{rid: "q", ssrc: 1111, seq: 100, frame: 1, ts: 5000, keyEvery: 1000, vp8: kind == "simulcast-vp8"}
	src := Source{SSRC: enc.ssrc, Video: AV1, DDExt: ddExt}
	switch kind {
	case "simulcast":
		src = Source{Video: AV1, DDExt: ddExt, Simulcast: &Simulcast{RIDExt: ridExt, RIDs: []string{"q"}, SSRC: 0x5151}}
	case "simulcast-vp8":
		src = Source{Video: VP8, DDExt: ddExt, Simulcast: &Simulcast{RIDExt: ridExt, RIDs: []string{"q"}, SSRC: 0x5151}}
	}
	testenv.Must(b, r.dp.SetStream(from, []Source{src}, rcv))
	udp := func(p []byte) []byte {
		return frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: p}.Marshal()
	}
	key := enc.nextFrame(b)
	r.dp.handle(slowConn, key[0], from, newReplicaBatch(false)) // (learns the encoding; installs the structure)
	r.verdict(udp(key[1]))
	for range 3 {
		enc.nextFrame(b) // (T2, T1, T2: not sent)
	}
	delta := udp(enc.nextFrame(b)[0]) // T0: every receiver's
	for _, l := range r.dp.streams[from].legs {
		testenv.Must(b, r.dp.objs.ReplicaGates.Put(l.slot, uint32(0)))
		if kind == "renumbered" {
			testenv.Must(b, l.SetTarget(1))
		}
	}
	for range 3 { // decided once: the run repeats a packet the receivers had
		r.verdict(delta)
	}
	before := r.outcomes()[Replica].Packets
	out := make([]byte, len(delta)+256)
	b.ResetTimer()
	testenv.Must(b, r.ns.Do(func() error { // (a repeated run would take the packet as the last replica left it)
		for range b.N {
			opts := &ebpf.RunOptions{Data: delta, DataOut: out, Context: skBuff{IngressIfindex: uint32(r.in.Index), Ifindex: uint32(r.in.Index)}}
			if _, err := r.dp.Program().Run(opts); err != nil {
				return err
			}
		}
		return nil
	}))
	b.StopTimer()
	if sent := r.outcomes()[Replica].Packets - before; sent < uint64(b.N)*receivers {
		b.Fatalf("%d replicas of %d runs, want %d each; outcomes %v", sent, b.N, receivers, r.outcomes())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/receivers, "ns/replica")
}

// A publication whose simulcast description changes (renegotiated) starts
// over in the eBPF plane, as on the user plane: its receivers get fresh
// legs (no place among the old encodings), the old encodings' sender
// entries go and their slots are given back.
func TestSimulcastDescriptionChanges(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	slowConn := r.slowPath(t, sfu)
	rcv := r.receivers(false, 1)
	video := func(sim *Simulcast) []Source { return []Source{{Video: AV1, DDExt: ddExt, Simulcast: sim}} }
	testenv.Must(t, r.dp.SetStream(from, video(&Simulcast{RIDExt: ridExt, RIDs: []string{"q", "h"}, SSRC: 0x5151}), rcv))
	batch := newReplicaBatch(false)
	for _, e := range []*simulcastEncoding{{index: 0, rid: "q", ssrc: 1111, keyEvery: 10}, {index: 1, rid: "h", ssrc: 2222, keyEvery: 10}} {
		r.dp.handle(slowConn, e.nextFrame(t)[0], from, batch) // learnt, and a key frame
	}
	old := r.leg(from, rcv[0].To)
	if st, err := old.State(); err != nil || st.EncodingSSRC != 2222 {
		t.Fatalf("before: the receiver on %d (%v), want h's 2222", st.EncodingSSRC, err)
	}
	r.dp.mu.Lock()
	hSlot := r.dp.streams[from].enc[1].slot
	r.dp.mu.Unlock()

	testenv.Must(t, r.dp.SetStream(from, video(&Simulcast{RIDExt: ridExt, RIDs: []string{"a", "b", "c"}, SSRC: 0x6161}), rcv))
	leg := r.leg(from, rcv[0].To)
	if st, err := leg.State(); leg == old || err != nil || st.EncodingSSRC != 0 {
		t.Errorf("after: the same leg %v, on %d (%v); want a fresh leg on no encoding", leg == old, st.EncodingSSRC, err)
	}
	if _, err := old.State(); err == nil {
		t.Error("the old leg still answers")
	}
	var s sfuSender
	for _, ssrc := range []uint32{1111, 2222} {
		k := sfuSenderKeyV4{Addr: netorder.IPv4(from.Addr()), Ssrc: netorder.Word(ssrc), Port: netorder.Port(from.Port())}
		if r.dp.objs.SendersV4.Lookup(k, &s) == nil {
			t.Errorf("SSRC %d of the old description still a sender", ssrc)
		}
	}
	r.dp.mu.Lock()
	defer r.dp.mu.Unlock()
	if e := &r.dp.streams[from].enc[1]; e.owned || r.dp.bySlot[hSlot] != nil {
		t.Errorf("h's slot %d still taken", hSlot)
	}
}
