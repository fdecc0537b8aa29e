package layers

import (
	"testing"

	"github.com/ebrtc/ebrtc/internal/sfu/rewrite"
)

// encoding is one simulcast encoding of a test sender: its own sequence
// numbers, timestamps and frame numbers (L1T3 frames, one packet each, a
// key frame every keyEvery frames).
type encoding struct {
	index    uint8
	seq      uint16
	ts       uint32
	frame    uint16
	keyEvery int
	sent     int
}

func (e *encoding) next() (Frame, uint32) {
	key := e.sent%e.keyEvery == 0
	d := l1t3[e.sent%len(l1t3)]
	targets := PackDTIs(d)
	if key {
		targets = AllSwitch
	}
	f := Frame{Packet: rewrite.Packet{Seq: e.seq, Frame: e.frame, Start: true, End: true}, DTIs: targets, Known: true,
		Key: key, Targets: 3}
	ts := e.ts
	e.seq, e.ts, e.frame, e.sent = e.seq+1, e.ts+3000, e.frame+1, e.sent+1
	return f, ts
}

// A receiver takes one encoding at a time, switches only at a key frame
// of the one it moves to, and sees one stream: its numbers, timestamps and
// frame numbers go on across each switch (numbers one up from the last
// sent; frame numbers may skip frames of a layer it does not get).
func TestSimulcastSwitchesAtKeyFramesIntoOneStream(t *testing.T) {
	low := &encoding{index: 0, seq: 40000, ts: 7e8, frame: 100, keyEvery: 8}
	high := &encoding{index: 1, seq: 9, ts: 123456, frame: 60000, keyEvery: 12}
	r := NewReplica()
	now := uint64(1e9)
	var last Numbers
	sent := 0
	target := EncodingTarget(1, AllTargets)
	check := func(e *encoding, f Frame, ts uint32) {
		out, v := r.DecideEncoding(&f, e.index, ts, target, 1, now)
		switch {
		case v == Other && e.index == r.Sim.Encoding:
			t.Fatalf("a packet of the encoding in force (%d) taken for another's", e.index)
		case v != Other && e.index != r.Sim.Encoding:
			t.Fatalf("encoding %d's packet went to a receiver on %d", e.index, r.Sim.Encoding)
		case v == Send:
			if sent > 0 && (out.Seq != last.Seq+1 || int16(out.Frame-last.Frame) <= 0 || int32(out.TS-last.TS) <= 0) {
				t.Fatalf("not one stream: %+v after %+v", out, last)
			}
			last, sent = out, sent+1
		}
	}
	for step := range 200 {
		now += 33e6
		switch step {
		case 60:
			target = EncodingTarget(0, AllTargets)
		case 130:
			target = EncodingTarget(1, 0) // back up, lowest layer only
		}
		for _, e := range []*encoding{low, high} {
			f, ts := e.next()
			check(e, f, ts)
		}
		if step == 59 && r.Sim.Encoding != 1 {
			t.Fatalf("never took the high encoding: %d", r.Sim.Encoding)
		}
		if step == 129 && r.Sim.Encoding != 0 {
			t.Fatalf("never moved down: %d", r.Sim.Encoding)
		}
	}
	if r.Sim.Encoding != 1 || r.Current != 0 {
		t.Errorf("ended on encoding %d, target %d: want 1, 0", r.Sim.Encoding, r.Current)
	}
	if sent < 100 { // (a key frame awaited twice, and T0 only at the end)
		t.Errorf("sent %d packets", sent)
	}
}

// A late packet of the new encoding from before the switch takes no
// number (the numbers below the switch were the old encoding's), and a
// NACK for an old encoding's number finds nothing of the new one.
func TestSimulcastLateFromBeforeTheSwitch(t *testing.T) {
	r := NewReplica()
	e0 := &encoding{index: 0, seq: 500, keyEvery: 1000}
	e1 := &encoding{index: 1, seq: 100, keyEvery: 3}
	f, ts := e0.next()
	if _, v := r.DecideEncoding(&f, 0, ts, EncodingTarget(0, AllTargets), 1, 1e9); v != Send {
		t.Fatalf("first key frame: %v", v)
	}
	for range 3 {
		f, ts = e1.next()
		r.DecideEncoding(&f, 1, ts, EncodingTarget(0, AllTargets), 1, 1e9)
	}
	f, ts = e1.next() // a key frame of 1 (the 4th packet)
	out, v := r.DecideEncoding(&f, 1, ts, EncodingTarget(1, AllTargets), 1, 2e9)
	if v != Send || out.Seq != 501 {
		t.Fatalf("switch: %v %+v, want the number after 500", v, out)
	}
	late := Frame{Packet: rewrite.Packet{Seq: 102, Frame: 2, Start: true, End: true}, Known: true, DTIs: AllSwitch, Targets: 3}
	if _, v := r.DecideEncoding(&late, 1, 0, EncodingTarget(1, AllTargets), 1, 2e9); v != Drop {
		t.Errorf("a late packet from before the switch: %v, want Drop", v)
	}
	if seq, ok := r.RW.Original(500 - r.Sim.Shift.Seq); ok {
		t.Errorf("the old encoding's number 500 maps to the new one's %d", seq)
	}
}

// Paused, a simulcast receiver gets nothing of any encoding; resumed, it
// starts again at a key frame.
func TestSimulcastPause(t *testing.T) {
	r := NewReplica()
	e := &encoding{index: 0, seq: 1, keyEvery: 10}
	for i := range 30 {
		target := EncodingTarget(0, AllTargets)
		if i >= 5 && i < 15 {
			target = NoVideo
		}
		f, ts := e.next()
		_, v := r.DecideEncoding(&f, 0, ts, target, 0, uint64(i+1)*1e9)
		want := Send
		if i >= 5 && i < 20 { // resumes at the key frame of packet 20
			want = Drop
		}
		if v != want {
			t.Fatalf("packet %d: %v, want %v", i, v, want)
		}
	}
}

// A move to another encoding that waits for its key frame says since
// when, however many frames of the one in force go by meanwhile: the
// agent asks for key frames once it has waited long enough.
func TestSimulcastSwitchWaitLasts(t *testing.T) {
	r := NewReplica()
	low := &encoding{index: 0, seq: 1, keyEvery: 1000}
	high := &encoding{index: 1, seq: 1, keyEvery: 1000}
	high.sent = 1 // (no key frame of its own for the test's length)
	f, ts := low.next()
	r.DecideEncoding(&f, 0, ts, EncodingTarget(0, AllTargets), 1, 1e9)
	for i := range 20 {
		now := uint64(2e9 + i*50e6)
		f, ts = low.next()
		r.DecideEncoding(&f, 0, ts, EncodingTarget(1, AllTargets), 1, now)
		f, ts = high.next()
		if _, v := r.DecideEncoding(&f, 1, ts, EncodingTarget(1, AllTargets), 1, now); v != Other {
			t.Fatalf("a delta frame of the encoding waited for: %v", v)
		}
	}
	if r.Sim.SwitchWait != 2e9 || r.Sim.Encoding != 0 {
		t.Errorf("waiting since %d on encoding %d, want since 2e9 on 0", r.Sim.SwitchWait, r.Sim.Encoding)
	}
	f, ts = high.next()
	f.Key, f.DTIs = true, AllSwitch
	if _, v := r.DecideEncoding(&f, 1, ts, EncodingTarget(1, AllTargets), 1, 4e9); v != Send || r.Sim.SwitchWait != 0 {
		t.Errorf("at the key frame: %v, waiting since %d", v, r.Sim.SwitchWait)
	}
}

// Encodings without a dependency descriptor (Firefox's VP8) switch the
// same way, at a key frame's first packet; each is all of it or, paused,
// nothing (renumbered over), resumed at a key frame.
func TestSimulcastUndescribed(t *testing.T) {
	r := NewReplica()
	seqs := [2]uint16{100, 5000}
	var last uint16
	sent := 0
	for i := range 60 {
		for enc := range uint8(2) {
			key := i%10 == 0
			f := Frame{Packet: rewrite.Packet{Seq: seqs[enc], Start: key, End: true}, Key: key}
			seqs[enc]++
			target := EncodingTarget(1, AllTargets)
			switch {
			case i >= 20 && i < 30:
				target = NoVideo
			case i >= 30:
				target = EncodingTarget(0, 0)
			}
			out, v := r.DecideEncoding(&f, enc, uint32(i)*3000, target, 1, uint64(i+1)*1e8)
			want := (i < 20 && enc == 1) || (i >= 30 && enc == 0) // (resumed on 0, at its key frame at 30)
			if (v == Send) != want {
				t.Fatalf("packet %d of %d: %v, want sent %v", i, enc, v, want)
			}
			if v == Send {
				if sent > 0 && out.Seq != last+1 {
					t.Fatalf("packet %d of %d went as %d after %d", i, enc, out.Seq, last)
				}
				last, sent = out.Seq, sent+1
			}
		}
	}
}

// When the encoding a receiver takes goes silent (a publisher whose uplink
// narrows stops its top encoding), the one it must move to says since
// when it waits: nothing of it reaches the receiver before its key frame,
// so nothing else would ask for one.
func TestSimulcastWaitWhenTheEncodingInForceStops(t *testing.T) {
	r := NewReplica()
	low := &encoding{index: 0, seq: 1, keyEvery: 1000}
	high := &encoding{index: 1, seq: 1, keyEvery: 1000}
	low.sent = 1 // (its key frames come only when asked for)
	f, ts := high.next()
	if _, v := r.DecideEncoding(&f, 1, ts, AllTargets, 1, 1e9); v != Send || r.Sim.Encoding != 1 {
		t.Fatalf("the top encoding's key frame: %v on %d", v, r.Sim.Encoding)
	}
	for i := range 10 { // the top is silent: the highest live is 0
		f, ts = low.next()
		if _, v := r.DecideEncoding(&f, 0, ts, AllTargets, 0, uint64(2e9+i*1e8)); v != Other {
			t.Fatalf("a delta frame of the encoding to move to: %v", v)
		}
	}
	if r.Sim.SwitchWait != 2e9 {
		t.Errorf("waiting since %d, want 2e9", r.Sim.SwitchWait)
	}
}

// A switch decided with a clock read before the last packet sent (another
// CPU, or the eBPF plane's slow path, read its clock first and decided
// last) moves the timestamps one tick on, not by a wrapped difference.
func TestSimulcastSwitchBehindTheClock(t *testing.T) {
	low := &encoding{index: 0, seq: 100, ts: 5000, frame: 1, keyEvery: 4}
	high := &encoding{index: 1, seq: 900, ts: 777, frame: 50, keyEvery: 4}
	r := NewReplica()
	f, ts := low.next()
	if _, v := r.DecideEncoding(&f, 0, ts, EncodingTarget(0, AllTargets), 1, 2e9); v != Send {
		t.Fatalf("the low encoding's key frame: %v", v)
	}
	f, ts = high.next()
	out, v := r.DecideEncoding(&f, 1, ts, EncodingTarget(1, AllTargets), 1, 2e9-5e6) // 5 ms behind
	if v != Send || r.Sim.Encoding != 1 || out.TS != 5000+1 {
		t.Errorf("moved to %d (%v) with timestamp %d, want 1 with %d", r.Sim.Encoding, v, out.TS, 5000+1)
	}
}

// A receiver moved between two VP8 encodings that number their pictures
// from starts of their own (Firefox: PictureID and TL0PICIDX random per
// encoding, the high one's behind the low one's, both wrapping) gets one
// numbering: each picture one up from the last it got, TL0PICIDX one up
// at each base layer picture and the same in between, across every
// switch up and down; packets of one picture share its numbers, and a
// packet turned to padding carries none.
func TestSimulcastVP8Pictures(t *testing.T) {
	type vp8Encoding struct {
		seq     uint16
		picture uint16
		tl0     uint8
		keyIdx  uint8
	}
	encs := [2]*vp8Encoding{{seq: 100, picture: 32760, tl0: 254, keyIdx: 30}, {seq: 5000, picture: 7, tl0: 3, keyIdx: 1}}
	r := NewReplica()
	var last VP8
	pictures, switches := 0, 0
	for i := range 120 {
		target := EncodingTarget(1, AllTargets)
		if (i/25)%2 == 1 {
			target = EncodingTarget(0, AllTargets)
		}
		tid := []uint8{0, 2, 1, 2}[i%4]
		key := i%8 == 0 // (of temporal layer 0)
		for enc, e := range encs {
			if tid == 0 {
				e.tl0++
			}
			if key {
				e.keyIdx = (e.keyIdx + 1) & 0x1f
			}
			for part := range 2 { // two packets a picture
				f := Frame{Packet: rewrite.Packet{Seq: e.seq, Start: key && part == 0, End: part == 1}, Key: key && part == 0,
					VP8: VP8{Picture: e.picture, TL0: e.tl0, KeyIdx: e.keyIdx, Fields: VP8Picture | VP8TL0 | VP8KeyIdx}}
				e.seq++
				before := r.Sim.Encoding
				out, v := r.DecideEncoding(&f, uint8(enc), uint32(i)*3000, target, 1, uint64(i+1)*1e8)
				if v != Send {
					continue
				}
				if r.Sim.Encoding != before && before != NoEncoding {
					switches++
				}
				got := out.VP8
				switch {
				case got.Fields != f.VP8.Fields:
					t.Fatalf("picture %d of %d: fields %#x, want %#x", i, enc, got.Fields, f.VP8.Fields)
				case pictures == 0:
				case part == 1 && got != last:
					t.Fatalf("picture %d of %d: its second packet %+v, its first %+v", i, enc, got, last)
				case part == 0 && got.Picture != (last.Picture+1)&0x7fff:
					t.Fatalf("picture %d of %d went as %d after %d", i, enc, got.Picture, last.Picture)
				case part == 0 && tid == 0 && got.TL0 != last.TL0+1, part == 0 && tid != 0 && got.TL0 != last.TL0:
					t.Fatalf("picture %d of %d (TID %d): TL0PICIDX %d after %d", i, enc, tid, got.TL0, last.TL0)
				case part == 0 && key && got.KeyIdx != (last.KeyIdx+1)&0x1f, part == 0 && !key && got.KeyIdx != last.KeyIdx:
					t.Fatalf("picture %d of %d (key %v): KEYIDX %d after %d", i, enc, key, got.KeyIdx, last.KeyIdx)
				}
				if part == 0 {
					pictures++
				}
				last = got
			}
			e.picture = (e.picture + 1) & 0x7fff
		}
	}
	if switches < 4 || pictures < 100 {
		t.Errorf("%d switches, %d pictures: the stream does not exercise switching", switches, pictures)
	}
}

// A late packet a receiver's number was kept for, and which it no longer
// takes (paused meanwhile), goes to it as padding: with no payload, no
// VP8 numbers, and the last numbers it got are left as they were.
func TestSimulcastVP8PaddingCarriesNone(t *testing.T) {
	r := NewReplica()
	vp8 := func(picture uint16) VP8 {
		return VP8{Picture: picture, TL0: uint8(picture), Fields: VP8Picture | VP8TL0}
	}
	send := func(seq uint16, key bool, picture uint16, target uint8) (Numbers, Verdict) {
		f := Frame{Packet: rewrite.Packet{Seq: seq, Frame: seq, Start: true, End: true}, Key: key, VP8: vp8(picture)}
		return r.DecideEncoding(&f, 0, uint32(seq)*3000, target, 0, uint64(seq)*1e8)
	}
	all := EncodingTarget(0, AllTargets)
	if _, v := send(10, true, 100, all); v != Send {
		t.Fatalf("the key frame: %v", v)
	}
	if _, v := send(12, false, 102, all); v != Send { // (11 late: its number kept)
		t.Fatalf("the next frame: %v", v)
	}
	last := r.Sim.Last
	out, v := send(11, false, 101, NoVideo)
	if v != Padding {
		t.Fatalf("the late packet, paused: %v, want padding", v)
	}
	if out.VP8 != (VP8{}) || r.Sim.Last != last {
		t.Errorf("padding went with VP8 numbers %+v; the last sent %+v became %+v", out.VP8, last, r.Sim.Last)
	}
}
