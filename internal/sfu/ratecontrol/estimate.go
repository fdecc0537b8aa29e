package ratecontrol

import (
	"math"
	"time"
)

// Estimator is one link's send-side bandwidth estimate (the SFU sends,
// the receiver's transport-wide feedback says when what arrived), as
// Google Congestion Control computes it: the delay-based detector drives
// an additive-increase, multiplicative-decrease rate control capped by
// what the receiver acknowledges taking; loss above 10% cuts it, under 2%
// lets it grow; a probe (padding sent at a rate above what the link
// carries now) that arrives whole raises it at once. Times are
// CLOCK_MONOTONIC (the data plane's send log); arrivals are on the
// receiver's clock and only their differences count.
type Estimator struct {
	delay  *delayDetector
	acked  ackedRate
	delays Window // one-way delays by send time, for a probe's queue (lowestDelay)
	// baseDelay: the lowest one-way delay the link ever showed (hasBase):
	// what it takes with no queue (Queued).
	baseDelay time.Duration
	hasBase   bool

	estimate    float64 // bits/s
	initialized bool
	state       aimdState
	lastChange  time.Duration
	lastDecr    time.Duration
	capacity    linkCapacity
	rtt         time.Duration

	lossWin  []lossSample  // reports since the last loss judgement
	lossCap  float64       // the loss-based bound; 0: none
	lossTime time.Duration // the last loss judgement
	lossCut  time.Duration // the send time feedback had reached when the bound was last cut
	recent   []lossSample  // reports over the last second (Loss)
	// newestSent is the latest send time feedback has reported on.
	newestSent time.Duration

	probe     *probe
	last      ProbeResult
	probeFrom time.Duration // the last probe's first send time
	probeEnd  time.Duration // the queue it built drains until then
	grace     time.Duration // a stream's move up goes through until then
}

// Grace holds the delay-based estimate (not the loss-based one) until
// until: a stream moved up, and its first frames (a key frame, when it
// resumes) queue for a moment on a link with little room to spare.
func (e *Estimator) Grace(until time.Duration) { e.grace = max(e.grace, until) }

// Restore raises an estimate below bps to it (what the link showed it
// carries before it carried less: an estimate cut meanwhile, app-limited,
// cannot grow back past 1.5 times what arrives); the capacity an overuse
// at the lower rate showed is forgotten. No estimate yet: none.
func (e *Estimator) Restore(now time.Duration, bps float64) {
	if !e.initialized || bps <= e.estimate {
		return
	}
	e.estimate, e.state, e.lastChange = bps, hold, now
	if e.capacity.above(bps) {
		e.capacity.known = false // learnt at the lower rate
	}
}

type aimdState int

const (
	hold aimdState = iota
	increase
	decrease
)

// Estimator constants (libwebrtc's GoogCC defaults).
const (
	beta             = 0.85
	minEstimate      = 30e3 // bits/s: below it nothing decodes anyway
	defaultRTT       = 200 * time.Millisecond
	ackedWindow      = 500 * time.Millisecond
	lossWindow       = time.Second
	lossHigh         = 0.10
	lossLow          = 0.02
	lossMinPackets   = 20
	packetBits       = 1200 * 8
	additiveFloor    = 4e3 // bits/s per second
	multiplicative   = 1.08
	lossReactionTime = 300 * time.Millisecond
)

type lossSample struct {
	at, sent time.Duration
	received bool
}

// NewEstimator has no estimate until its feedback shows the link's limit.
func NewEstimator() *Estimator {
	return &Estimator{delay: newDelayDetector(), rtt: defaultRTT, capacity: linkCapacity{variance: 0.4}, delays: Window{Span: delayWindow}}
}

// Estimate is the estimate in bits/s; false until the feedback has shown
// a limit (a queue building, loss) or a probe measured one: until then
// the link carries what is sent.
func (e *Estimator) Estimate() (float64, bool) {
	switch {
	case !e.initialized && e.lossCap == 0:
		return 0, false
	case !e.initialized:
		return max(e.lossCap, minEstimate), true
	case e.lossCap > 0:
		return max(min(e.estimate, e.lossCap), minEstimate), true
	}
	return max(e.estimate, minEstimate), true
}

// Usage is what the delay gradient last said.
func (e *Estimator) Usage() Usage { return e.delay.usage }

// Capacity is the link's capacity as the delivered rate at overuse shows
// it (bits/s); false until the link queued, or once it delivered well
// over it.
func (e *Estimator) Capacity() (float64, bool) {
	return 1000 * e.capacity.estimate, e.capacity.known
}

// Acked is what the receiver acknowledged taking lately, bits/s.
func (e *Estimator) Acked() float64 { return e.acked.rate() }

// Loss is the share of packets reported lost over the last second.
func (e *Estimator) Loss() float64 { return e.LossSince(0) }

// LossSince is Loss among the packets sent at or after sent (0 with fewer
// than lossMinSince of them: too few to tell).
func (e *Estimator) LossSince(sent time.Duration) float64 {
	lost, n := 0, 0
	for _, s := range e.recent {
		if s.sent < sent {
			continue
		}
		n++
		if !s.received {
			lost++
		}
	}
	if n == 0 || sent > 0 && n < lossMinSince {
		return 0
	}
	return float64(lost) / float64(n)
}

// lossMinSince: LossSince tells nothing from fewer packets.
const lossMinSince = 10

// RTT is the round trip the feedback shows (default 200 ms).
func (e *Estimator) RTT() time.Duration { return e.rtt }

// Queued is the queue the link has held all through the last
// delayWindow: the lowest one-way delay of that second over the lowest it
// ever showed (0: none known). A full queue shows no delay gradient, only
// loss; this tells its loss from a path's random loss.
func (e *Estimator) Queued() time.Duration {
	d := e.lowestDelay()
	if d == noDelay || !e.hasBase {
		return 0
	}
	return max(d-e.baseDelay, 0)
}

// OnAcks takes a link's acks, in the order they arrived, at now.
func (e *Estimator) OnAcks(now time.Duration, acks []Ack) {
	if len(acks) == 0 {
		return
	}
	var newest time.Duration
	for _, a := range acks {
		e.newestSent = max(e.newestSent, a.Sent)
		probing := a.Sent >= e.probeFrom && (e.probe != nil || a.Sent < e.probeEnd)
		if a.Sent >= e.lossCut && !probing { // loss of what was sent before the last cut was answered by it; a probe's is its own
			e.lossWin = append(e.lossWin, lossSample{at: now, sent: a.Sent, received: a.Received})
		}
		e.recent = append(e.recent, lossSample{at: now, sent: a.Sent, received: a.Received})
		if e.probe != nil {
			e.probe.add(a)
		}
		if !a.Received {
			continue
		}
		newest = max(newest, a.Sent)
		e.acked.add(a)
		e.delay.add(a)
		if e.probe == nil { // (a probe's delays are its own)
			e.delays.Add(a.Sent, float64(a.Arrived-a.Sent))
		}
		if d := a.Arrived - a.Sent; !e.hasBase || d < e.baseDelay {
			e.baseDelay, e.hasBase = d, true
		}
	}
	if newest > 0 && now > newest {
		// Feedback comes every 50-100 ms: the smallest round trip seen lately.
		e.rtt = min(max((e.rtt*7+(now-newest))/8, 10*time.Millisecond), time.Second)
	}
	e.trimLoss(now)
	e.judgeProbe(now)
	e.updateRate(now)
	e.updateLoss(now)
}

// updateRate is the AIMD rate control on the detector's verdict.
func (e *Estimator) updateRate(now time.Duration) {
	acked := e.acked.rate()
	switch e.delay.usage {
	case Overuse:
		if e.probe != nil || now < e.probeEnd || now < e.grace {
			// The probe built the queue on purpose (its judgement, what
			// the link carried, sets the estimate), or a stream just
			// moved up and its key frame or switch frame goes through:
			// not a cut to what the media alone takes. Loss still cuts.
			e.state = hold
			break
		}
		if e.state != decrease {
			e.state = decrease
		}
	case Normal:
		if e.state == hold {
			e.state, e.lastChange = increase, now
		}
	case Underuse:
		e.state = hold
	}
	if !e.initialized && (e.state != decrease || acked <= 0) {
		// Until the link shows a limit (a queue building, loss, a probe's
		// arrival rate), it has none the feedback can tell: an estimate
		// from what is sent now would be what the sender ramps through.
		return
	}
	switch e.state {
	case increase:
		if e.Loss() > lossLow {
			// A full queue shows no delay gradient, only loss: between 2%
			// and 10% the estimate holds (GoogCC's loss-based rule).
			e.lastChange = now
			break
		}
		e.increase(now, acked)
	case decrease:
		if e.initialized && now-e.lastDecr < min(max(e.rtt, 10*time.Millisecond), 200*time.Millisecond) {
			return // once per round trip
		}
		if acked <= 0 {
			acked = e.estimate
		}
		next := beta * acked
		if e.initialized && next > e.estimate {
			next = e.estimate
		}
		e.capacity.overuse(acked)
		e.estimate, e.initialized = max(next, minEstimate), true
		e.state, e.lastChange, e.lastDecr = hold, now, now
	}
}

// increase grows the estimate: additively near the link's known capacity,
// multiplicatively (8% a second) away from it; never above 1.5 times what
// the receiver acknowledges taking.
func (e *Estimator) increase(now time.Duration, acked float64) {
	if e.capacity.above(acked) {
		e.capacity.known = false // the link grew
	}
	limit := 1.5*acked + 10e3
	dt := min(now-e.lastChange, time.Second)
	e.lastChange = now
	if acked <= 0 || e.estimate >= limit {
		return
	}
	var next float64
	if e.capacity.near(e.estimate) {
		// About a packet per response time (a round trip and 100 ms).
		perFrame := e.estimate / 30
		packets := math.Ceil(perFrame / packetBits)
		perSecond := max(perFrame/packets/(e.rtt+100*time.Millisecond).Seconds(), additiveFloor)
		next = e.estimate + perSecond*dt.Seconds()
	} else {
		next = e.estimate + max(e.estimate*(math.Pow(multiplicative, dt.Seconds())-1), 1e3)
	}
	e.estimate = min(next, limit)
}

// updateLoss judges the loss reported since the last judgement, once it
// covers lossMinPackets and lossReactionTime: over 10% cuts the bound to
// what arrived less half the loss, under 2% lets it grow 8% a second
// (the windows do not overlap: loss the last cut answered is not counted
// again).
func (e *Estimator) updateLoss(now time.Duration) {
	lost, n := e.lossCount()
	if n < lossMinPackets || now-e.lossTime < lossReactionTime {
		return
	}
	loss := float64(lost) / float64(n)
	e.lossWin = e.lossWin[:0]
	dt := min(now-e.lossTime, time.Second)
	e.lossTime = now
	switch {
	case loss > lossHigh:
		base := e.acked.rate()
		if base <= 0 || (e.lossCap > 0 && e.lossCap < base) {
			base = e.lossCap
		}
		if base <= 0 {
			base = e.estimate
		}
		e.lossCap = max(base*(1-0.5*loss), minEstimate)
		e.lossCut = now // what is sent from now on answers to the cut
	case loss < lossLow && e.lossCap > 0:
		e.lossCap *= math.Pow(multiplicative, dt.Seconds())
		if e.lossCap >= e.estimate {
			e.lossCap = 0 // the delay-based estimate bounds again
		}
	}
}

func (e *Estimator) lossCount() (lost, n int) {
	for _, s := range e.lossWin {
		n++
		if !s.received {
			lost++
		}
	}
	return lost, n
}

func (e *Estimator) trimLoss(now time.Duration) {
	i := 0
	for i < len(e.recent) && now-e.recent[i].at > lossWindow {
		i++
	}
	e.recent = e.recent[i:]
}

// ackedRate is what arrived over the last ackedWindow of the receiver's
// clock, bits/s.
type ackedRate struct {
	samples []Ack
	bytes   int
}

func (r *ackedRate) add(a Ack) {
	r.samples = append(r.samples, a)
	r.bytes += a.Size
	for len(r.samples) > 1 && a.Arrived-r.samples[0].Arrived > ackedWindow {
		r.bytes -= r.samples[0].Size
		r.samples = r.samples[1:]
	}
}

// rate is 0 until the window spans a quarter second.
func (r *ackedRate) rate() float64 {
	if len(r.samples) < 2 {
		return 0
	}
	span := r.samples[len(r.samples)-1].Arrived - r.samples[0].Arrived
	if span < ackedWindow/2 {
		return 0
	}
	return float64(8*(r.bytes-r.samples[0].Size)) / span.Seconds()
}

// linkCapacity is the link's capacity as the acked rates at overuse show
// it (an average with its deviation), in kbit/s.
type linkCapacity struct {
	estimate, variance float64
	known              bool
}

func (c *linkCapacity) overuse(ackedBPS float64) {
	kbps := ackedBPS / 1000
	if !c.known {
		c.estimate, c.known = kbps, true
		return
	}
	const alpha = 0.05
	c.estimate = (1-alpha)*c.estimate + alpha*kbps
	norm := max(c.estimate, 1)
	c.variance = min(max((1-alpha)*c.variance+alpha*(c.estimate-kbps)*(c.estimate-kbps)/norm, 0.4), 2.5)
}

// near says whether bps is within the capacity's deviation (additive
// increase there).
func (c *linkCapacity) near(bps float64) bool {
	if !c.known {
		return false
	}
	dev := math.Sqrt(c.variance * c.estimate)
	return bps/1000 >= c.estimate-3*dev && bps/1000 <= c.estimate+3*dev
}

func (c *linkCapacity) above(bps float64) bool {
	return c.known && bps/1000 > c.estimate+3*math.Sqrt(c.variance*c.estimate)
}
