package ratecontrol

import "time"

// Rates measures each decode target's bitrate: a frame's bytes count
// toward every target the frame is present in. Smoothed over Window.
type Rates struct {
	Window time.Duration // 0: one second
	bytes  []float64     // per target, in the current window
	rate   []float64     // per target, bits/s, smoothed
	start  time.Duration
	last   []uint64 // Observe's previous totals
}

// Observe counts what each target carried since the previous totals
// (cumulative bytes per target, as the data planes count them).
func (r *Rates) Observe(now time.Duration, totals []uint64) {
	r.roll(now, len(totals))
	if len(r.last) == len(totals) {
		for t, n := range totals {
			if n >= r.last[t] {
				r.bytes[t] += float64(n - r.last[t])
			}
		}
	}
	r.last = append(r.last[:0], totals...)
}

// Bitrates is each decode target's bitrate, bits/s.
func (r *Rates) Bitrates(now time.Duration) []float64 {
	r.roll(now, len(r.rate))
	return append([]float64(nil), r.rate...)
}

// roll closes the window if it is over: its rates weigh half in the
// smoothed ones.
func (r *Rates) roll(now time.Duration, targets int) {
	window := r.Window
	if window == 0 {
		window = time.Second
	}
	if len(r.bytes) != targets {
		r.bytes, r.rate, r.start = make([]float64, targets), inherit(r.rate, targets), now
		return
	}
	if elapsed := now - r.start; elapsed >= window {
		for t := range r.bytes {
			bps := 8 * r.bytes[t] / elapsed.Seconds()
			if r.rate[t] == 0 {
				r.rate[t] = bps
			} else {
				r.rate[t] = (r.rate[t] + bps) / 2
			}
			r.bytes[t] = 0
		}
		r.start = now
	}
}

// inherit is a new structure's targets' rates, from the old one's, until
// windows of their own are in: counted from the top, the whole stream
// the same, each target below it one frame rate down the old one's (a
// sender's temporal layers come and go at the bottom: L1T2's lowest
// target is L1T3's 7.5 fps one, not its 3.75 fps one, and costs twice
// that); a target with none below it in the old structure starts at the
// old lowest (more than it costs: a new structure's lowest layer read
// low overfills a link whose lowest layers just fit until the windows
// show it, seconds later).
func inherit(old []float64, targets int) []float64 {
	rate := make([]float64, targets)
	n := len(old)
	if n == 0 {
		return rate
	}
	for t := range rate {
		rate[t] = old[max(n-targets+t, 0)]
	}
	return rate
}

// Window keeps a value's samples over its last Span, for their lowest
// (a stream's audio as its whole less its video's layers, which a key
// frame or a new structure's first windows inflate for a moment but never
// lower; a probe's one-way delay before it) or highest (a link's recent
// estimate).
type Window struct {
	Span    time.Duration
	samples []timedRate
}

type timedRate struct {
	at time.Duration
	v  float64
}

// Add takes the value at at, dropping what is older than Span before it.
func (w *Window) Add(at time.Duration, v float64) {
	i := 0
	for i < len(w.samples) && at-w.samples[i].at > w.Span {
		i++
	}
	w.samples = append(w.samples[i:], timedRate{at, v})
}

// Reset forgets every sample.
func (w *Window) Reset() { w.samples = w.samples[:0] }

// Min is the lowest sample (false: none).
func (w *Window) Min() (float64, bool) {
	return w.extreme(func(a, b float64) float64 { return min(a, b) })
}

// Max is the highest sample (false: none).
func (w *Window) Max() (float64, bool) {
	return w.extreme(func(a, b float64) float64 { return max(a, b) })
}

func (w *Window) extreme(pick func(float64, float64) float64) (float64, bool) {
	if len(w.samples) == 0 {
		return 0, false
	}
	v := w.samples[0].v
	for _, s := range w.samples[1:] {
		v = pick(v, s.v)
	}
	return v, true
}
