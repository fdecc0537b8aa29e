package ratecontrol

import (
	"testing"
	"time"
)

// At 20 fps with T0 frames of 4,000 bytes, T1 of 2,000 and T2 of 1,000:
// target 0 carries 5 T0 frames a second (160 kbit/s), target 1 adds 5 T1
// (240), target 2 adds 10 T2 (320).
func TestRatesPerDecodeTarget(t *testing.T) {
	var r Rates
	var now time.Duration
	sizes := []int{4000, 1000, 2000, 1000}
	totals := make([]uint64, 3) // as the data planes count: a frame's bytes to every target it is in
	for f := range 200 {        // 10 s
		for t, present := range l1t3[f%4] {
			if present {
				totals[t] += uint64(sizes[f%4])
			}
		}
		r.Observe(now, totals)
		now += 50 * time.Millisecond
	}
	got := r.Bitrates(now)
	want := []float64{160e3, 240e3, 320e3}
	for i := range want {
		if d := got[i]/want[i] - 1; d < -0.05 || d > 0.05 {
			t.Errorf("target %d: %.0f bit/s, want %.0f", i, got[i], want[i])
		}
	}
}

// A sender switching L1T3 -> L1T2 -> L1T3: the new structure's targets
// start at the old ones of their frame rate (from the top), at once, and
// the lowest of L1T2 is never read at what L1T3's lowest cost; once a
// window is in, each is its own.
func TestRatesAcrossAStructureChange(t *testing.T) {
	var r Rates
	var now time.Duration
	run := func(seconds int, sizes []int, cadence [][]bool) {
		totals := make([]uint64, len(cadence[0]))
		for f := range 20 * seconds {
			for t, present := range cadence[f%len(cadence)] {
				if present {
					totals[t] += uint64(sizes[f%len(sizes)])
				}
			}
			r.Observe(now, totals)
			now += 50 * time.Millisecond
		}
	}
	l1t3Sizes := []int{4000, 1000, 2000, 1000} // 160, 240, 320 kbit/s
	l1t2 := [][]bool{{true, true}, {false, true}}
	l1t2Sizes := []int{5000, 1000} // 400, 480 kbit/s
	run(10, l1t3Sizes, l1t3)
	run(0, l1t2Sizes, l1t2)
	totals := make([]uint64, 2)
	r.Observe(now, totals) // the new structure's first count
	if got := r.Bitrates(now); len(got) != 2 || !near(got[0], 240e3) || !near(got[1], 320e3) {
		t.Fatalf("L1T2 just after L1T3 (160, 240, 320 kbit/s): %v, want L1T3's 7.5 and 15 fps targets (240, 320)", got)
	}
	run(10, l1t2Sizes, l1t2)
	if got := r.Bitrates(now); !near(got[0], 400e3) || !near(got[1], 480e3) {
		t.Errorf("L1T2 after 10 s: %v, want 400 and 480 kbit/s", got)
	}
	r.Observe(now, make([]uint64, 3))
	if got := r.Bitrates(now); len(got) != 3 || !near(got[0], 400e3) || !near(got[1], 400e3) || !near(got[2], 480e3) {
		t.Errorf("L1T3 just after L1T2 (400, 480 kbit/s): %v, want 400, 400, 480 (none below the lowest: the old lowest)", got)
	}
}

func near(got, want float64) bool { return got >= 0.95*want && got <= 1.05*want }

// Chromium's L1T3 cadence, T0 T2 T1 T2, as the targets each frame is in.
var l1t3 = [][]bool{{true, true, true}, {false, false, true}, {false, true, true}, {false, false, true}}

// A window's lowest ignores a jump for a moment (a key frame counted as
// audio); a lasting change shows once the window is past.
func TestWindowMin(t *testing.T) {
	f := Window{Span: 5 * time.Second}
	at := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	low := func(now, v float64) float64 {
		f.Add(at(now), v)
		m, _ := f.Min()
		return m
	}
	if got := low(0, 55e3); got != 55e3 {
		t.Fatalf("first value 55000: lowest %v", got)
	}
	for _, c := range []struct {
		at, bps, want float64
	}{
		{1, 56e3, 55e3}, {2, 83e3, 55e3}, {3, 80e3, 55e3}, {4.5, 60e3, 55e3},
		{5.5, 60e3, 56e3}, {7.5, 60e3, 60e3}, {8, 40e3, 40e3},
	} {
		if got := low(c.at, c.bps); got != c.want {
			t.Errorf("at %vs, %v: lowest %v, want %v", c.at, c.bps, got, c.want)
		}
	}
	if hi, _ := f.Max(); hi != 80e3 { // (at 8 s, the 80000 of 3 s is 5 s old: in)
		t.Errorf("highest %v, want 80000", hi)
	}
}
