// Package layers picks, per receiver, the decode target of a sender's
// scalable stream (temporal layers of AV1, VP8 or VP9, described by the
// dependency descriptor) that fits the receiver's bandwidth estimate, and applies a
// pick to the stream only where the receiver's decoder can follow it: down
// at once, up only at a frame that is a switch point of the higher target.
package layers

import "time"

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

// Chooser picks a receiver's decode target from its bandwidth estimate,
// its reported loss and each target's bitrate. A receive-side estimate
// (REMB) of a receiver that gets less than its link carries sits near what
// it receives and climbs only slowly (libwebrtc caps it at 1.5 times the
// incoming rate plus 10 kbit/s, and increases it additively after a
// decrease), and at a full queue it stops falling; so the estimate says
// when to go down, loss says so too, and going up is tried:
//   - down at once when the estimate falls below Keep times the target's
//     bitrate (for a target reached by a try: the lower of that and the
//     highest estimate since the try), to the highest target the
//     estimate keeps, or by one target when the receiver reports more
//     than LossHigh lost;
//   - up when a higher target has been within Headroom of the estimate
//     for HoldUp without a break (an estimate that wavers does not make
//     the stream waver);
//   - up by one target, tried, when the receiver has been on its target
//     TryAfter, its estimate has not fallen (by more than Keep) for as
//     long, it reports under LossLow lost and no try is backing off; a try that loss or the estimate undoes within
//     TryWindow doubles the back-off (from twice TryAfter up to
//     MaxBackoff), which an estimate 1.25 times the one it left ends.
type Chooser struct {
	Headroom   float64       // 0: 0.9
	Keep       float64       // 0: 0.85
	LossHigh   float64       // 0: 0.1
	LossLow    float64       // 0: 0.02
	HoldUp     time.Duration // 0: 3 s
	TryAfter   time.Duration // 0: 5 s
	TryWindow  time.Duration // 0: 8 s
	MaxBackoff time.Duration // 0: 40 s

	current  int
	started  bool
	peak     float64   // highest estimate since it last fell (by more than Keep)
	steady   time.Time // since when it has not fallen so
	level    float64   // after a try: what the target is judged by (the estimate then, and its highs since); 0: its bitrate
	moved    time.Time // when current was taken
	tried    time.Time // the last try (zero: none pending judgement)
	grace    time.Time // until then, loss is an undone try's draining
	tryFrom  int       // the target before it, and its level
	fromLvl  float64
	backoff  time.Duration
	nextTry  time.Time
	failEst  float64     // the estimate when the last try was undone
	fitSince []time.Time // per target: since when it has fitted without a break
}

// linkBetter: an estimate this much above the one an undone try left ends
// the back-off (the link has grown since).
const linkBetter = 1.25

// UndoGrace: after a try is undone, the loss it caused drains this long
// without taking a target more.
const UndoGrace = 5 * time.Second

// NewChooser has the defaults set.
func NewChooser() *Chooser {
	c := &Chooser{}
	c.defaults()
	return c
}

// Choose returns the decode target for an estimate (bits/s) and a loss
// (0-1) given each target's bitrate (ascending: target i includes the
// layers of the ones below it); mayTry false holds tries back (another
// stream on the receiver's link is being tried). It starts at the highest.
func (c *Chooser) Choose(now time.Time, estimate, loss float64, rates []float64, mayTry bool) int {
	if len(rates) == 0 {
		return 0
	}
	c.defaults()
	if len(c.fitSince) != len(rates) { // a new structure: start over on it
		c.fitSince, c.started, c.tried, c.tryFrom, c.fromLvl = make([]time.Time, len(rates)), false, time.Time{}, 0, 0
	}
	if !c.started {
		c.started, c.current = true, len(rates)-1
		c.move(now, len(rates)-1, estimate)
	}
	if estimate < c.Keep*c.peak {
		c.peak, c.steady = estimate, now
	}
	c.peak = max(c.peak, estimate)
	if c.level > 0 {
		c.level = max(c.level, estimate)
	}
	if c.failEst > 0 && estimate >= linkBetter*c.failEst {
		c.nextTry, c.backoff, c.failEst = now, 0, 0 // the link carries more than when the try failed
	}
	if !c.tried.IsZero() && now.Sub(c.tried) >= c.TryWindow {
		c.tried, c.backoff = time.Time{}, c.TryAfter // the try held
	}
	best := 0
	for t := range rates {
		fits := rates[t] <= c.Headroom*estimate
		if t < c.current {
			fits = estimate >= c.Keep*rates[t]
		} else if t == c.current {
			level := rates[t]
			if c.level > 0 {
				level = min(level, c.level)
			}
			fits = estimate >= c.Keep*level
		}
		if t <= c.current && fits {
			best = t
		}
		if !fits {
			c.fitSince[t] = time.Time{}
		} else if c.fitSince[t].IsZero() {
			c.fitSince[t] = now
		}
	}
	if best == c.current && loss > c.LossHigh && best > 0 && !now.Before(c.grace) {
		best--
	}
	switch {
	case best < c.current:
		c.down(now, best, estimate, rates)
	case c.up(now, estimate):
	case mayTry && c.current < len(rates)-1 && !now.Before(c.nextTry) && now.Sub(c.moved) >= c.TryAfter &&
		now.Sub(c.steady) >= c.TryAfter && loss < c.LossLow:
		from, lvl := c.current, c.level
		c.move(now, c.current+1, estimate)
		c.tried, c.level, c.tryFrom, c.fromLvl = now, estimate, from, lvl
	}
	return c.current
}

// Current is the target chosen last; false before the first choice.
func (c *Chooser) Current() (int, bool) { return c.current, c.started }

// Trying says whether a try awaits its judgement (TryWindow).
func (c *Chooser) Trying() bool { return !c.tried.IsZero() }

// NextTry is when the back-off of the last undone try ends.
func (c *Chooser) NextTry() time.Time { return c.nextTry }

func (c *Chooser) defaults() {
	c.Headroom, c.Keep, c.LossHigh, c.LossLow = or(c.Headroom, 0.9), or(c.Keep, 0.85), or(c.LossHigh, 0.1), or(c.LossLow, 0.02)
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&c.HoldUp, 3 * time.Second}, {&c.TryAfter, 5 * time.Second}, {&c.TryWindow, 8 * time.Second}, {&c.MaxBackoff, 40 * time.Second}} {
		if *d.v == 0 {
			*d.v = d.def
		}
	}
}

func (c *Chooser) move(now time.Time, t int, estimate float64) {
	if t < c.current { // what fitted above has to fit HoldUp anew
		for i := t + 1; i < len(c.fitSince); i++ {
			c.fitSince[i] = time.Time{}
		}
	}
	c.current, c.peak, c.moved, c.steady, c.level = t, estimate, now, now, 0
}

// down moves down; a try undone within its window backs off, and goes
// back to where it came from as that was judged, if the estimate keeps it.
func (c *Chooser) down(now time.Time, t int, estimate float64, rates []float64) {
	if c.tried.IsZero() {
		c.move(now, t, estimate)
		return
	}
	c.backoff = min(max(2*c.backoff, 2*c.TryAfter), c.MaxBackoff)
	c.nextTry, c.tried, c.grace, c.failEst = now.Add(c.backoff), time.Time{}, now.Add(UndoGrace), estimate
	level := rates[c.tryFrom]
	if c.fromLvl > 0 {
		level = min(level, c.fromLvl)
	}
	if c.tryFrom >= t && c.tryFrom < c.current && estimate >= c.Keep*level {
		lvl := c.fromLvl
		c.move(now, c.tryFrom, estimate)
		c.level = lvl
		return
	}
	c.move(now, t, estimate)
}

// up moves to the highest target that has fitted for HoldUp, if any.
func (c *Chooser) up(now time.Time, estimate float64) bool {
	for t := len(c.fitSince) - 1; t > c.current; t-- {
		if !c.fitSince[t].IsZero() && now.Sub(c.fitSince[t]) >= c.HoldUp {
			c.move(now, t, estimate)
			return true
		}
	}
	return false
}

func or(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}
