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

// At 20 fps with T0 frames of 4,000 bytes, T1 of 2,000 and T2 of 1,000:
// target 0 carries 5 T0 frames a second (160 kbit/s), target 1 adds 5 T1
// (240), target 2 adds 10 T2 (320).
func TestRatesPerDecodeTarget(t *testing.T) {
	var r Rates
	now := time.Unix(0, 0)
	sizes := []int{4000, 1000, 2000, 1000}
	totals := make([]uint64, 3) // as the data planes count: a frame's bytes to every target it is in
	for f := range 200 {        // 10 s
		for t, d := range l1t3[f%4] {
			if d != dd.NotPresent {
				totals[t] += uint64(sizes[f%4])
			}
		}
		r.Observe(now, totals)
		now = now.Add(50 * time.Millisecond)
	}
	got := r.Bitrates(now)
	want := []float64{160e3, 240e3, 320e3}
	for i := range want {
		if d := got[i]/want[i] - 1; d < -0.05 || d > 0.05 {
			t.Errorf("target %d: %.0f bit/s, want %.0f", i, got[i], want[i])
		}
	}
}

// Down at once; up only after the higher target has fitted for HoldUp
// without a break; an estimate wavering around a target's rate does not
// move the choice up and down.
func TestChooserHysteresis(t *testing.T) {
	rates := []float64{160e3, 240e3, 320e3}
	c := Chooser{HoldUp: 3 * time.Second, TryAfter: time.Hour} // no tries here: TestChooserTriesUp
	now := time.Unix(0, 0)
	step := func(d time.Duration, estimate float64) int {
		now = now.Add(d)
		return c.Choose(now, estimate, 0, rates, true)
	}
	if got := step(0, 1e6); got != 2 {
		t.Fatalf("first choice with room for all: %d", got)
	}
	if got := step(time.Second, 200e3); got != 0 { // 0.9 x 200k fits only target 0
		t.Fatalf("after the estimate fell: %d, want 0 at once", got)
	}
	for i := range 5 { // wavering: fits target 2 for 2 s at a time, then not
		if got := step(2*time.Second, 400e3); got != 0 {
			t.Fatalf("wavering %d: moved up to %d", i, got)
		}
		if got := step(100*time.Millisecond, 200e3); got != 0 {
			t.Fatalf("wavering %d: %d", i, got)
		}
	}
	step(time.Second, 400e3)
	step(time.Second, 400e3)
	if got := step(time.Second, 300e3); got != 0 { // target 1 fits; 2 fitted 2 s only
		t.Fatalf("before HoldUp: %d", got)
	}
	if got := step(time.Second, 300e3); got != 1 { // target 1 fitted since 3 s ago (400k and 300k both fit it)
		t.Fatalf("after HoldUp at 300k: %d, want 1", got)
	}
}

// A receive-side estimate cannot show more than the receiver gets: one at
// the rate it gets keeps its target; held lower, the receiver is tried one
// target up after TryAfter of a steady estimate and no loss, and keeps it
// if nothing undoes it within TryWindow. Loss above LossHigh takes a
// target back at once, and a try undone so backs off, from twice TryAfter
// doubling up to MaxBackoff.
func TestChooserTriesUp(t *testing.T) {
	rates := []float64{160e3, 240e3, 320e3}
	var c Chooser
	now := time.Unix(0, 0)
	run := func(d time.Duration, estimate, loss float64) int {
		var got int
		for end := now.Add(d); now.Before(end); now = now.Add(250 * time.Millisecond) {
			got = c.Choose(now, estimate, loss, rates, true)
		}
		return got
	}
	if got := run(10*time.Second, 1.02*320e3, 0); got != 2 {
		t.Fatalf("an estimate at the rate it gets: moved to %d", got)
	}
	if got := run(time.Second, 100e3, 0); got != 0 {
		t.Fatalf("a collapsed estimate: %d, want 0", got)
	}
	if got := run(4*time.Second, 1.02*160e3, 0); got != 0 {
		t.Fatalf("tried before TryAfter: %d", got)
	}
	if got := run(2*time.Second, 1.02*160e3, 0); got != 1 {
		t.Fatalf("not tried after TryAfter: %d", got)
	}
	if got := run(3*time.Second, 1.02*160e3, 0); got != 1 {
		t.Fatalf("a try the estimate did not undo: %d", got)
	}
	if got := run(2*time.Second, 1.02*160e3, 0); got != 2 {
		t.Fatalf("the next try: %d", got)
	}
	if got := run(250*time.Millisecond, 1.02*240e3, 0.2); got != 1 {
		t.Fatalf("loss undid the try: %d, want 1", got)
	}
	// Backed off 10 s (twice TryAfter): no try for that long, then one.
	if got := run(9*time.Second, 1.02*240e3, 0); got != 1 {
		t.Fatalf("tried while backing off: %d", got)
	}
	if got := run(2*time.Second, 1.02*240e3, 0); got != 2 {
		t.Fatalf("not tried after the back-off: %d", got)
	}
	if got := run(250*time.Millisecond, 206e3, 0); got != 1 {
		t.Fatalf("a falling estimate undid the try: %d, want back where it came from", got)
	}
	// 20 s now.
	if got := run(19*time.Second, 1.02*240e3, 0); got != 1 {
		t.Fatalf("tried while backing off: %d", got)
	}
	if got := run(2*time.Second, 1.02*240e3, 0); got != 2 {
		t.Fatalf("not tried after the back-off: %d", got)
	}
	if got := run(250*time.Millisecond, 1.02*240e3, 0.2); got != 1 || c.backoff != 40*time.Second {
		t.Fatalf("after three undone tries: target %d, back-off %v, want 1 and 40 s", got, c.backoff)
	}
	// An estimate 1.25 times the one the last undone try left: the link
	// grew, the back-off ends.
	if got := run(5500*time.Millisecond, 320e3, 0); got != 2 {
		t.Fatalf("the link grew: %d, want a try at once (the back-off was 40 s)", got)
	}
	// Random loss under LossHigh neither takes a target back nor allows a try.
	if got := run(30*time.Second, 1.02*240e3, 0.05); got != 1 {
		t.Errorf("at 5%% loss: %d, want 1", got)
	}
}

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

// A structure with fewer targets in the middle of a try starts the
// choice over on it (it used to index the old target past the new end).
func TestChooserNewStructureDuringATry(t *testing.T) {
	c := NewChooser()
	now := time.Unix(0, 0)
	four := []float64{100e3, 200e3, 300e3, 400e3}
	for range 40 { // 10 s at an estimate that keeps target 2: a try to 3 starts
		now = now.Add(250 * time.Millisecond)
		c.Choose(now, 1.02*300e3, 0, four, true)
	}
	if !c.Trying() {
		t.Fatal("no try to set the case up")
	}
	now = now.Add(250 * time.Millisecond)
	if got := c.Choose(now, 50e3, 1, []float64{100e3, 200e3}, true); got != 0 {
		t.Errorf("two targets, a collapsed estimate: %d, want 0", got)
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
