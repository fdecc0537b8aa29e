package layers

import (
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/sfu/rewrite"
)

func dtis(s string) []dd.DTI {
	var out []dd.DTI
	for _, c := range s {
		out = append(out, dd.DTI(strings.IndexRune("-DSR", c)))
	}
	return out
}

// Chromium's L1T3 frames, in its cadence: T0 SSS, T2 --D, T1 -DS, T2 --D.
var l1t3 = [][]dd.DTI{dtis("SSS"), dtis("--D"), dtis("-DS"), dtis("--D")}

// A frame's start arriving late (reordered, or retransmitted for another
// receiver) does not switch the target: the rest of that frame went by
// under the old one, and the switch would send a frame without its start.
func TestLateStartDoesNotSwitch(t *testing.T) {
	r := NewReplica()
	send := func(seq, frame uint16, start, end bool, d []dd.DTI, target uint8) Verdict {
		f := Frame{Packet: rewrite.Packet{Seq: seq, Frame: frame, Start: start, End: end}, DTIs: PackDTIs(d), Known: true,
			Targets: uint8(len(d))}
		_, v := r.Decide(&f, target, 1e9)
		return v
	}
	send(1, 1, true, true, dtis("SSS"), 0) // key frame, target 0
	// Frame 2 (T1: -DS, a switch point of target 2) loses its start; its
	// other packets come while the target is 2.
	send(3, 2, false, false, dtis("-DS"), 2)
	send(4, 2, false, true, dtis("-DS"), 2)
	if v := send(2, 2, true, false, dtis("-DS"), 2); r.Current != 0 || v == Send {
		t.Errorf("the late start switched to %d (verdict %v)", r.Current, v)
	}
	if send(5, 3, true, true, dtis("--D"), 2); r.Current != 0 {
		t.Errorf("switched up at a T2 frame: %d", r.Current)
	}
	if send(6, 4, true, true, dtis("-DS"), 2); r.Current != 2 {
		t.Errorf("no switch at the next switch point: %d", r.Current)
	}
}

// A receiver's decode target moves only at a frame's start: down at once,
// up only at a frame that is a switch point of the higher target
// (Chromium's L1T3: T1 frames for target 2, T0 frames for all); an
// up-switch with no switch point in sight says since when it waits, and
// the key frame is due once, after the wait.
func TestSwitchOnlyWhereTheDecoderCanFollow(t *testing.T) {
	r := NewReplica()
	var seq, frameNo uint16
	now := uint64(1e9)
	frame := func(target uint8, d []dd.DTI) uint8 {
		now += 50e6
		frameNo++
		for i := range 2 {
			seq++
			f := Frame{Packet: rewrite.Packet{Seq: seq, Frame: frameNo, Start: i == 0, End: i == 1},
				DTIs: PackDTIs(d), Known: d != nil, Targets: uint8(len(d))}
			if _, v := r.Decide(&f, target, now); v == AsIs && target != AllTargets {
				t.Fatalf("frame %d: as is under target %d", frameNo, target)
			}
		}
		return r.Current
	}
	if got := frame(AllTargets, dtis("SSS")); got != AllTargets || r.RW.Started != 0 {
		t.Fatalf("never adapted: current %d, renumbering %d", got, r.RW.Started)
	}
	if got := frame(2, dtis("SSS")); got != 2 {
		t.Fatalf("key frame: target %d, want 2", got)
	}
	if got := frame(0, dtis("--D")); got != 0 {
		t.Fatalf("down: target %d, want 0 at once", got)
	}
	// Up to 2 (AllTargets clamps to the highest): not at T2 (D) frames, at the T1 frame (S for target 2).
	if got := frame(AllTargets, dtis("--D")); got != 0 || r.SwitchWait == 0 {
		t.Fatalf("up at a T2 frame: %d (waiting since %d)", got, r.SwitchWait)
	}
	if got := frame(AllTargets, dtis("-DS")); got != 2 || r.SwitchWait != 0 {
		t.Fatalf("up at a T1 frame: %d, want 2", got)
	}
	// Up to 1 from 0 where only key frames are switch points of target 1.
	frame(0, dtis("SSS"))
	for range 30 {
		if got := frame(1, dtis("-D-")); got != 0 {
			t.Fatalf("up at a D frame: %d", got)
		}
	}
	if !KeyFrameDue(r.SwitchWait, now, 500*time.Millisecond) || KeyFrameDue(r.SwitchWait, r.SwitchWait+1, 500*time.Millisecond) ||
		KeyFrameDue(0, now, 0) {
		t.Error("KeyFrameDue disagrees with the wait")
	}
	if got := frame(1, dtis("SSS")); got != 1 || r.SwitchWait != 0 {
		t.Errorf("at the key frame: %d, want 1", got)
	}
	// A frame whose template is unknown moves nothing and goes out.
	f := Frame{Packet: rewrite.Packet{Seq: seq + 1, Frame: frameNo + 1, Start: true}}
	if _, v := r.Decide(&f, 0, now); v != Send || r.Current != 1 {
		t.Errorf("an unknown frame: %v, current %d", v, r.Current)
	}
}

// Paused (NoVideo), a receiver gets no video at all, not even frames it
// had; asked to resume it waits for a key frame (its decoder lost the
// references while paused), however many switch points of its target
// pass before one.
func TestPauseResumesAtAKeyFrame(t *testing.T) {
	r := NewReplica()
	var seq, frameNo uint16
	frame := func(target uint8, d []dd.DTI, key bool) Verdict {
		frameNo++
		seq++
		f := Frame{Packet: rewrite.Packet{Seq: seq, Frame: frameNo, Start: true, End: true}, DTIs: PackDTIs(d), Known: true,
			Key: key, Targets: uint8(len(d))}
		_, v := r.Decide(&f, target, 1e9)
		return v
	}
	frame(2, dtis("SSS"), true)
	if v := frame(NoVideo, dtis("SSS"), false); v != Drop || r.Current != NoVideo {
		t.Fatalf("paused: %v, current %d", v, r.Current)
	}
	for range 8 {
		if v := frame(1, dtis("SSS"), false); v != Drop || r.Current != NoVideo {
			t.Fatalf("resumed at a delta frame: %v, current %d", v, r.Current)
		}
	}
	if r.SwitchWait == 0 {
		t.Error("the resumption does not say it waits (no key frame asked for)")
	}
	if v := frame(1, dtis("SSS"), true); v != Send || r.Current != 1 || r.SwitchWait != 0 {
		t.Errorf("at the key frame: %v, current %d", v, r.Current)
	}
}
