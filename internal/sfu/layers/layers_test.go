package layers

import (
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/dd"
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
	for f := range 200 { // 10 s
		r.Add(now, sizes[f%4], l1t3[f%4])
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
	c := Chooser{HoldUp: 3 * time.Second}
	now := time.Unix(0, 0)
	step := func(d time.Duration, estimate float64) int {
		now = now.Add(d)
		return c.Choose(now, estimate, rates)
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

// A receiver moves down at the next frame; up only at a frame that is a
// switch point of the higher target (Chromium's L1T3: T1 frames for target
// 2, T0 frames for all); an up-switch with no switch point in sight asks
// for one key frame after PLIAfter.
func TestSwitchOnlyWhereTheDecoderCanFollow(t *testing.T) {
	var s Switch
	now := time.Unix(0, 0)
	frame := func(chosen int, d []dd.DTI) (int, bool) {
		now = now.Add(50 * time.Millisecond)
		return s.Frame(now, chosen, d)
	}
	if got, _ := frame(2, dtis("SSS")); got != 2 {
		t.Fatalf("key frame: target %d, want 2", got)
	}
	if got, _ := frame(0, dtis("--D")); got != 0 {
		t.Fatalf("down: target %d, want 0 at once", got)
	}
	if Forward(0, dtis("--D")) || !Forward(0, dtis("SSS")) || !Forward(2, dtis("--D")) || Forward(5, dtis("SSS")) || Forward(-1, dtis("SSS")) {
		t.Error("Forward disagrees with the DTIs")
	}
	// Up to 2: not at T2 (D) frames, at the T1 frame (S for target 2).
	if got, _ := frame(2, dtis("--D")); got != 0 {
		t.Fatalf("up at a T2 frame: %d", got)
	}
	if got, _ := frame(2, dtis("-DS")); got != 2 {
		t.Fatalf("up at a T1 frame: %d, want 2", got)
	}
	// Up to 1 from 0 where only key frames are switch points of target 1:
	// one PLI after 500 ms, not one per frame.
	frame(0, dtis("SSS"))
	plis := 0
	for range 30 {
		got, pli := frame(1, dtis("-D-"))
		if got != 0 {
			t.Fatalf("up at a D frame: %d", got)
		}
		if pli {
			plis++
		}
	}
	if plis != 1 {
		t.Errorf("%d key frame requests while waiting 1.5 s for a switch point, want 1", plis)
	}
	if got, _ := frame(1, dtis("SSS")); got != 1 {
		t.Errorf("at the key frame: %d, want 1", got)
	}
	// A frame without decode targets (no structure yet) moves nothing out of range.
	if got, _ := frame(2, nil); got != 0 || Forward(got, nil) {
		t.Errorf("a frame without DTIs: target %d", got)
	}
}
