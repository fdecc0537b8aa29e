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

// Chooser picks the highest decode target whose bitrate fits a share of
// the receiver's estimate: lower at once when the current one stops
// fitting, higher only once it has fitted for HoldUp (so an estimate that
// wavers does not make the stream waver).
type Chooser struct {
	Headroom float64       // share of the estimate a target may use; 0: 0.9
	HoldUp   time.Duration // 0: 3 s
	current  int
	started  bool
	fitSince []time.Time // per target: since when it has fitted without a break
}

// Choose returns the decode target for an estimate (bits/s) given each
// target's bitrate (ascending: target i includes the layers of the ones
// below it).
func (c *Chooser) Choose(now time.Time, estimate float64, rates []float64) int {
	if len(rates) == 0 {
		return 0
	}
	headroom, hold := c.Headroom, c.HoldUp
	if headroom == 0 {
		headroom = 0.9
	}
	if hold == 0 {
		hold = 3 * time.Second
	}
	if len(c.fitSince) != len(rates) {
		c.fitSince = make([]time.Time, len(rates))
	}
	best := 0
	for t := range rates {
		if rates[t] <= headroom*estimate {
			best = t
			if c.fitSince[t].IsZero() {
				c.fitSince[t] = now
			}
		} else {
			c.fitSince[t] = time.Time{}
		}
	}
	if !c.started || c.current >= len(rates) {
		c.started, c.current = true, best
	}
	if best < c.current {
		c.current = best // down at once
	}
	for t := len(rates) - 1; t > c.current; t-- {
		if !c.fitSince[t].IsZero() && now.Sub(c.fitSince[t]) >= hold {
			c.current = t // up once it has fitted for hold
			break
		}
	}
	return c.current
}

// Switch applies a receiver's chosen decode target to the sender's frames.
type Switch struct {
	// PLIAfter: an up-switch waiting this long for a switch point asks
	// for a key frame; 0: 500 ms.
	PLIAfter time.Duration
	current  int
	waiting  time.Time // since when an up-switch waits
	asked    bool      // a key frame was asked for this wait
}

// Frame is called at each frame's first packet with the target chosen and
// the frame's DTIs. It returns the target in force for the frame, and
// whether to ask the sender for a key frame.
func (s *Switch) Frame(now time.Time, chosen int, dtis []dd.DTI) (target int, askKeyFrame bool) {
	chosen = max(0, min(chosen, len(dtis)-1))
	switch {
	case chosen < s.current: // lower targets never depend on what is dropped
		s.current, s.waiting, s.asked = chosen, time.Time{}, false
	case chosen > s.current:
		if dtis[chosen] == dd.Switch {
			s.current, s.waiting, s.asked = chosen, time.Time{}, false
			break
		}
		if s.waiting.IsZero() {
			s.waiting = now
		}
		after := s.PLIAfter
		if after == 0 {
			after = 500 * time.Millisecond
		}
		if !s.asked && now.Sub(s.waiting) >= after {
			s.asked, askKeyFrame = true, true
		}
	default:
		s.waiting, s.asked = time.Time{}, false
	}
	return s.current, askKeyFrame
}

// Forward says whether a frame with these DTIs goes to a receiver at
// target.
func Forward(target int, dtis []dd.DTI) bool {
	return target >= 0 && target < len(dtis) && dtis[target] != dd.NotPresent
}
