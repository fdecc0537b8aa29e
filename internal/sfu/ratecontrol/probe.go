package ratecontrol

import "time"

// A probe is what the link carries when the SFU sends more than it does
// now (padding on top of the media) for a while: the packets sent in the
// second half of the probe's window are judged together once their
// feedback is in (in the first half a shaper's token bucket may let a
// burst through faster than its rate). What arrived at the rate it was
// sent shows the link carries that rate; arriving slower, the receive
// rate is what it carries.

// ProbeResult is a judged probe.
type ProbeResult struct {
	Goal     float64       // the rate it was sent at, bits/s
	Measured float64       // what the link carried, bits/s (0: too little came back to tell)
	Success  bool          // it carried at least 90% of Goal without a queue building
	At       time.Duration // when it was judged
}

type probe struct {
	from, until time.Duration // send times of the packets it covers
	goal        float64
	// What came back of them.
	packets, received         int
	sentBytes, recvBytes      int
	firstSent, lastSent       time.Duration
	lastSentSize              int
	firstArrived, lastArrived time.Duration
	firstArrivedSize          int
	overuse                   bool
	past                      bool // an ack sent after until came in: the window's feedback is complete
}

// minProbePackets: fewer tell nothing.
const minProbePackets = 5

// Probe starts judging the packets sent in [from, until) as a probe at
// goal bits/s; a probe still being judged is dropped.
func (e *Estimator) Probe(from, until time.Duration, goal float64) {
	e.probe, e.probeFrom, e.probeEnd = &probe{from: from, until: until, goal: goal}, from, until+probeDrain
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
	// Judged on its second half: a shaper's token bucket lets the first
	// part through at the line's rate, whatever the shaper's.
	if a.Sent < p.from+(p.until-p.from)/2 {
		return
	}
	if p.packets == 0 || a.Sent < p.firstSent {
		p.firstSent = a.Sent
	}
	if a.Sent >= p.lastSent {
		p.lastSent, p.lastSentSize = a.Sent, a.Size
	}
	p.packets++
	p.sentBytes += a.Size
	if !a.Received {
		return
	}
	if p.received == 0 || a.Arrived < p.firstArrived {
		p.firstArrived, p.firstArrivedSize = a.Arrived, a.Size
	}
	p.lastArrived = max(p.lastArrived, a.Arrived)
	p.received++
	p.recvBytes += a.Size
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
	if !p.past && now < p.until+time.Second {
		return
	}
	e.probe = nil
	r := ProbeResult{Goal: p.goal, At: now}
	if p.packets >= minProbePackets && p.received >= minProbePackets && p.lastSent > p.firstSent && p.lastArrived > p.firstArrived {
		send := float64(8*(p.sentBytes-p.lastSentSize)) / (p.lastSent - p.firstSent).Seconds()
		recv := float64(8*(p.recvBytes-p.firstArrivedSize)) / (p.lastArrived - p.firstArrived).Seconds()
		r.Measured = min(send, recv)
		if recv < 0.9*send {
			r.Measured = 0.95 * recv // the link saturated: it carries what arrived
		}
		r.Success = !p.overuse && r.Measured >= 0.9*p.goal
	}
	e.last = r
	e.probeEnd = now + probeDrain
	if r.Measured <= 0 {
		return
	}
	// What the link carried is the estimate: up to it after a success;
	// after a failure no more than it (a saturated link's arrival rate is
	// its capacity), but not cut below it either: the queue was the
	// probe's, and the media alone went through before it.
	raises := r.Measured > e.estimate
	if !e.initialized || raises && r.Success || !raises && !r.Success {
		e.estimate, e.initialized, e.state, e.lastChange = r.Measured, true, hold, now
	}
	if e.lossCap > 0 && e.lossCap < r.Measured {
		e.lossCap = r.Measured // what arrived whole was not lost
	}
}

// probeDrain: after a probe is judged, the queue it built drains this long
// (its delay is no congestion).
const probeDrain = 300 * time.Millisecond
