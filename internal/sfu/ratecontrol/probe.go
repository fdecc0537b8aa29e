package ratecontrol

import (
	"math"
	"time"
)

// A probe is what the link carries when the SFU sends more than it does
// now (padding on top of the media) for a while: the packets sent in the
// second half of the probe's window are judged together once their
// feedback is in. What arrived at the rate it was sent shows the link
// carries that rate, less what a shaper's token bucket may have let
// through over its rate (bucketAllowance, over the whole window: a bucket
// drains at the probe's excess over the shaper, and a small excess takes
// longer than a first half to drain it: "probe showed 416 kbit/s" on a
// 359 kbit/s tbf); arriving slower, the receive rate is what it carries.
// A probe is sent that much over its goal (ProbeRate) so that it can show
// the goal.

// ProbeResult is a judged probe.
type ProbeResult struct {
	Goal     float64 // what it was to show, bits/s (sent at ProbeRate)
	Measured float64 // what the link carried, bits/s (0: too little came back to tell)
	Success  bool    // the link carries at least 90% of Goal
	// Full: the link queued under it (Measured: what its queue drained
	// at, if it was stopped for it) or carried less than it sent
	// (Measured: 95% of what arrived); a success where that is what the
	// goal was to show, but no higher goal would succeed now.
	Full bool
	At   time.Duration // when it was judged
}

type probe struct {
	from, until time.Duration // send times of the packets it covers
	goal        float64
	sending     float64 // the media's rate when it began
	// What came back of them.
	packets, sentBytes  int
	firstSent, lastSent time.Duration
	lastSentSize        int
	// The whole window's packets, from its start (what a bucket passes is
	// taken off them).
	windowBytes, windowLastSize int
	windowLast                  time.Duration
	reportedLost                map[time.Duration]bool // by send time
	// delivered: when the last of them left the bottleneck, on the
	// sender's clock (sent, and the queue it met: a queue building at the
	// window's end delays what it carried).
	delivered time.Duration
	received  arrivals
	overuse   bool
	past      bool // an ack sent after until came in: the window's feedback is complete
	// The queue it builds: one-way delay over base (the lowest of the
	// second before it), in a row of queuedRun packets over
	// probeQueueLimit, stops it.
	base   time.Duration
	queued int
	// stopped: when its padding stopped for the queue (0: it did not);
	// what was sent from then on is the media alone, and is not judged.
	stopped time.Duration
	// queue, longest: the packets arriving queued (delayed over
	// queuedDelay) in a row now, and the longest such row: a queue drains
	// at the link's rate, a shaper's bucket or not.
	queue, longest arrivals
}

// arrivals is packets' arrival: a rate.
type arrivals struct {
	n, bytes    int
	first, last time.Duration
	firstSize   int
}

func (r *arrivals) add(a Ack) {
	if r.n == 0 || a.Arrived < r.first {
		r.first, r.firstSize = a.Arrived, a.Size
	}
	r.last = max(r.last, a.Arrived)
	r.n++
	r.bytes += a.Size
}

// rate is bits/s (0: too few to tell).
func (r *arrivals) rate() float64 {
	if r.n < minProbePackets || r.last <= r.first {
		return 0
	}
	return float64(8*(r.bytes-r.firstSize)) / (r.last - r.first).Seconds()
}

// A probe stops once it has built probeQueueLimit of queue (queuedRun
// packets in a row delayed that much more than before it): well before a
// shaper's queue (tbf's latency 200ms, a home router's) drops the media
// that shares it, and long after one late packet.
const (
	probeQueueLimit = 50 * time.Millisecond
	queuedRun       = 2
	queuedDelay     = 10 * time.Millisecond
)

// minProbePackets: fewer tell nothing.
const minProbePackets = 5

// bucketAllowance is the most a shaper's token bucket is taken to pass
// over its rate unseen, bytes: tbf's burst 8kb, as an operator shapes a
// link (a bucket deeper than that can still lead a move up over the link,
// which the delay then undoes).
const bucketAllowance = 8 << 10

// ProbeRate is what a probe of length sends to show goal: the goal and a
// bucket's allowance over the window.
func ProbeRate(goal float64, length time.Duration) float64 {
	return goal + 8*bucketAllowance/length.Seconds()
}

// Probe starts judging the packets sent in [from, until) as a probe at
// goal bits/s over media at sending bits/s (which the link carried, not
// losing nor queueing, when the probe began); a probe still being judged
// is dropped.
func (e *Estimator) Probe(from, until time.Duration, goal, sending float64) {
	e.probe = &probe{from: from, until: until, goal: goal, sending: sending, base: e.lowestDelay()}
	e.probeFrom, e.probeEnd = from, until+probeDrain
}

// ProbeQueueing says whether the probe under way builds a queue: its
// padding should stop (the link showed it carries less).
func (e *Estimator) ProbeQueueing() bool { return e.probe != nil && e.probe.overuse }

// Probing says whether a probe awaits its judgement.
func (e *Estimator) Probing() bool { return e.probe != nil }

// LastProbe is the last probe's judgement (zero: none yet).
func (e *Estimator) LastProbe() ProbeResult { return e.last }

func (p *probe) add(a Ack) {
	if a.Sent >= p.until {
		p.past = true
		return
	}
	if a.Received && a.Sent >= p.from && p.base != noDelay {
		queue := a.Arrived - a.Sent - p.base
		if queue > queuedDelay {
			p.queue.add(a)
		} else {
			p.queue = arrivals{}
		}
		if p.queue.n > p.longest.n {
			p.longest = p.queue
		}
		if queue > probeQueueLimit {
			p.queued++
		} else {
			p.queued = 0
		}
		p.overuse = p.overuse || p.queued >= queuedRun
	}
	// Not on what was sent after the padding stopped: the media alone.
	if a.Sent < p.from || p.stopped > 0 && a.Sent >= p.stopped {
		return
	}
	// A packet reported lost and then received comes twice: sent once.
	sentBefore := p.reportedLost[a.Sent]
	if !a.Received {
		if p.reportedLost == nil {
			p.reportedLost = map[time.Duration]bool{}
		}
		p.reportedLost[a.Sent] = true
	}
	secondHalf := a.Sent >= p.from+(p.until-p.from)/2
	if !sentBefore {
		p.windowBytes += a.Size
		if a.Sent >= p.windowLast {
			p.windowLast, p.windowLastSize = a.Sent, a.Size
		}
		// Its rates on its second half: a shaper's token bucket lets the
		// first part through at the line's rate, whatever the shaper's.
		if secondHalf {
			if p.packets == 0 || a.Sent < p.firstSent {
				p.firstSent = a.Sent
			}
			if a.Sent >= p.lastSent {
				p.lastSent, p.lastSentSize = a.Sent, a.Size
			}
			p.packets++
			p.sentBytes += a.Size
		}
	}
	if a.Received && p.base != noDelay {
		p.delivered = max(p.delivered, a.Sent+max(0, a.Arrived-a.Sent-p.base))
	}
	if secondHalf && a.Received {
		p.received.add(a)
	}
}

// judgeProbe ends a probe whose feedback is in (or overdue): a success
// raises the estimate to what the link carried.
func (e *Estimator) judgeProbe(now time.Duration) {
	p := e.probe
	if p == nil {
		return
	}
	if e.delay.usage == Overuse && now >= p.from {
		p.overuse = true
	}
	if p.overuse && p.stopped == 0 {
		p.stopped = now // Link.Padding stops it
	}
	if !p.past && now < p.until+time.Second {
		return
	}
	e.probe = nil
	r := ProbeResult{Goal: p.goal, At: now, Full: p.overuse}
	if recv := p.received.rate(); p.packets >= minProbePackets && recv > 0 && p.lastSent > p.firstSent {
		send := float64(8*(p.sentBytes-p.lastSentSize)) / (p.lastSent - p.firstSent).Seconds()
		r.Measured = min(send, recv, p.beyondBucket())
		if recv < 0.9*send {
			r.Measured, r.Full = 0.95*recv, true // the link saturated: it carries what arrived
		}
	}
	if q := p.longest.rate(); p.stopped > 0 && q > 0 {
		// Stopped for its queue: the link carries what that queue drained
		// at, bucket or not (what the second half saw may be the media
		// alone). All of it: a stream resumes at 85% of a probe's showing,
		// and 95% of this on top made a stream needing 79% of a 232 kbit/s
		// link wait for a drain rate of 98% of it (14 s paused in a
		// package run, four probes for it).
		r.Measured = min(q, p.windowRate()) // (a run bunched by jitter shows no more than was sent)
	}
	// A link that queued under the probe, or carried less than it sent,
	// is full at what it carried; where that is the goal, the probe showed
	// it all the same: a goal a little under the link is sent a bucket's
	// allowance over it, and queues (every such probe failing, a stream
	// whose lowest layer fitted a 226 kbit/s link with a fifth to spare
	// stayed paused for 20 s in a TestShapedReceiver run).
	r.Success = r.Measured > 0 && r.Measured >= 0.9*p.goal
	if r.Full {
		// What the goal was to show (the goal is that and measureMargin):
		// a full link that shows less moves nothing up, and its "success"
		// would have the same probe again at once.
		r.Success = r.Measured >= p.goal/measureMargin
	}
	e.last = r
	e.probeEnd = now + probeDrain
	if r.Measured <= 0 {
		return
	}
	// What the link carried is the estimate: up to it after a success;
	// after a failure no more than it (a saturated link's arrival rate is
	// its capacity), but not cut below it either: the queue was the
	// probe's, and the media alone went through before it. Nor by more
	// than a delay-based cut would (beta): a measure can be wrong (jitter
	// taken for a queue), a cut too far costs layers; a link that carries
	// less than that shows it in the media's own delay.
	raises := r.Measured > e.estimate
	switch {
	case !e.initialized || raises && r.Success:
		e.estimate, e.initialized, e.state, e.lastChange = r.Measured, true, hold, now
	case !raises && !r.Success:
		// (Nor below what the media took before it without a queue: a
		// delay that jitters, a receiver short of CPU, is no link.)
		e.estimate, e.state, e.lastChange = max(r.Measured, beta*e.estimate, p.sending), hold, now
	}
	if e.lossCap > 0 && e.lossCap < r.Measured {
		e.lossCap = r.Measured // what arrived whole was not lost
	}
}

// beyondBucket is what the window's packets took to leave the bottleneck
// (sent, or delivered if a queue held the last of them), less what a
// shaper's bucket may have passed over the shaper's rate: what the link
// is shown to carry.
func (p *probe) beyondBucket() float64 {
	d := max(p.windowLast, p.delivered) - p.from
	if d <= 0 {
		return 0
	}
	return max(0, float64(8*(p.windowBytes-p.windowLastSize-bucketAllowance))/d.Seconds())
}

// windowRate is the window's send rate (0: too little to tell).
func (p *probe) windowRate() float64 {
	d := p.windowLast - p.from
	if d <= 0 {
		return 0
	}
	return float64(8*(p.windowBytes-p.windowLastSize)) / d.Seconds()
}

// probeDrain: after a probe is judged, the queue it built drains this long
// (its delay is no congestion).
const probeDrain = 300 * time.Millisecond

// noDelay: no one-way delay known.
const noDelay = time.Duration(math.MaxInt64)

// delayWindow: a probe's queue is its packets' one-way delay (arrival less
// send time, an offset between the clocks in it, the same for all) over
// the lowest of this long before it.
const delayWindow = time.Second

// lowestDelay is the lowest one-way delay of the packets sent over the
// last delayWindow (noDelay: none).
func (e *Estimator) lowestDelay() time.Duration {
	d, ok := e.delays.Min()
	if !ok {
		return noDelay
	}
	return time.Duration(d)
}
