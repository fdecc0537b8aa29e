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
