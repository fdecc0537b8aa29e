// Package layers picks, per receiver, the decode target of a sender's
// scalable stream (AV1 temporal layers, described by the dependency
// descriptor) that fits the receiver's bandwidth estimate, and applies a
// pick to the stream only where the receiver's decoder can follow it: down
// at once, up only at a frame that is a switch point of the higher target.
package layers

import (
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/dd"
)

// Rates measures each decode target's bitrate: a frame's bytes count
// toward every target the frame is present in. Smoothed over Window.
type Rates struct {
	Window time.Duration // 0: one second
	bytes  []float64     // per target, in the current window
	rate   []float64     // per target, bits/s, smoothed
	start  time.Time
	last   []uint64 // Observe's previous totals
}

// Observe counts what each target carried since the previous totals
// (cumulative bytes per target, as the data planes count them).
func (r *Rates) Observe(now time.Time, totals []uint64) {
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

// Add counts one frame (or packet) of n bytes with its DTIs.
func (r *Rates) Add(now time.Time, n int, dtis []dd.DTI) {
	r.roll(now, len(dtis))
	for t, d := range dtis {
		if d != dd.NotPresent {
			r.bytes[t] += float64(n)
		}
	}
}

// Bitrates is each decode target's bitrate, bits/s.
func (r *Rates) Bitrates(now time.Time) []float64 {
	r.roll(now, len(r.rate))
	return append([]float64(nil), r.rate...)
}

// roll closes the window if it is over: its rates weigh half in the
// smoothed ones.
func (r *Rates) roll(now time.Time, targets int) {
	window := r.Window
	if window == 0 {
		window = time.Second
	}
	if len(r.bytes) != targets {
		r.bytes, r.rate, r.start = make([]float64, targets), make([]float64, targets), now
		return
	}
	if elapsed := now.Sub(r.start); elapsed >= window {
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

// Chooser picks a receiver's decode target from its bandwidth estimate
// and each target's bitrate. A receive-side estimate (REMB) of a receiver
// that gets all its link carries sits near what it receives, and never
// climbs far above it (libwebrtc caps it at 1.5 times the incoming rate
// plus 10 kbit/s), so:
//   - the target in force (and any lower) still fits while the estimate
//     is at least Keep times its bitrate; below that the choice falls at
//     once to the highest that fits;
//   - a higher target fits when its bitrate is within Headroom of the
//     estimate, and the next one up also when the estimate is at least
//     Probe times what the receiver gets now (the link carries more than
//     it is given: the estimate cannot show more);
//   - the choice rises only once the higher target has fitted for HoldUp
//     without a break (an estimate that wavers does not make the stream
//     waver).
type Chooser struct {
	Headroom float64       // share of the estimate a higher target may use; 0: 0.9
	Keep     float64       // 0: 0.85
	Probe    float64       // 0: 1.3
	HoldUp   time.Duration // 0: 3 s
	current  int
	started  bool
	fitSince []time.Time // per target: since when it has fitted without a break
}

// Choose returns the decode target for an estimate (bits/s) given each
// target's bitrate (ascending: target i includes the layers of the ones
// below it). It starts at the highest.
func (c *Chooser) Choose(now time.Time, estimate float64, rates []float64) int {
	if len(rates) == 0 {
		return 0
	}
	headroom, keep, probe, hold := or(c.Headroom, 0.9), or(c.Keep, 0.85), or(c.Probe, 1.3), c.HoldUp
	if hold == 0 {
		hold = 3 * time.Second
	}
	if len(c.fitSince) != len(rates) {
		c.fitSince = make([]time.Time, len(rates))
	}
	if !c.started || c.current >= len(rates) {
		c.started, c.current = true, len(rates)-1
	}
	best := 0
	for t := range rates {
		var fits bool
		if t <= c.current {
			fits = estimate >= keep*rates[t]
			if fits {
				best = t
			}
		} else {
			fits = rates[t] <= headroom*estimate || (t == c.current+1 && estimate >= probe*rates[c.current])
		}
		if !fits {
			c.fitSince[t] = time.Time{}
		} else if c.fitSince[t].IsZero() {
			c.fitSince[t] = now
		}
	}
	if best < c.current {
		c.current = best // down at once
		return c.current
	}
	for t := len(rates) - 1; t > c.current; t-- {
		if !c.fitSince[t].IsZero() && now.Sub(c.fitSince[t]) >= hold {
			c.current = t // up once it has fitted for hold
			break
		}
	}
	return c.current
}

func or(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

// Forward says whether a frame with these DTIs goes to a receiver at
// target.
func Forward(target int, dtis []dd.DTI) bool {
	return target >= 0 && target < len(dtis) && dtis[target] != dd.NotPresent
}
