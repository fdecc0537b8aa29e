package ratecontrol

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Link is one receiver's downlink: every stream it receives (one leg per
// sender) shares it. Each round it takes the link's estimate, allocates
// it over the streams (Allocate) and moves their targets: down at once,
// up only to what a probe showed the link carries (the estimate alone
// cannot show more than is sent: it is capped at 1.5 times what arrives),
// or, on a link estimated only by the receiver's REMB, after it fitted
// for a while. Probes are planned here and sent by the caller.
type Link struct {
	est        *Estimator
	merge      merge
	targets    []int
	streams    []linkStream  // per stream, beside its target
	peaks      Window        // the estimate's recent values (peak)
	capacity   float64       // what the link carries, as the last round saw it
	upSince    time.Duration // since when an up-move has fitted (REMB links)
	proven     float64       // what the last successful probe showed, bits/s
	provenAt   time.Duration
	successes  int     // probes in a row that succeeded
	measured   float64 // what the last probe measured, bits/s
	measuredAt time.Duration
	probing    bool
	next       time.Duration // no probe before
	backoff    time.Duration
	lastDown   time.Duration
	lastUp     time.Duration
	carried    float64       // what the streams cost before the last move up (the link carried that)
	upBackoff  time.Duration // probes wait this long after a move up that did not hold
	bucket     Bucket
	// carriedBefore: what the streams cost in the round before a sender's
	// new structure made one of them costlier.
	carriedBefore float64
	budget        float64 // for the streams' media, bits/s, as last allocated
	// delivered: what the link delivered (acked) in recent rounds, for
	// what it carried before a stream fell silent (silence).
	delivered Window
}

// Link constants.
const (
	// headroom: the streams get this share of the estimate; the rest
	// carries retransmissions and absorbs the estimate's noise.
	headroom = 0.9
	// upShare: a move up takes the streams to this share of what a probe
	// showed, no more: a probe shows the link carries at least its goal,
	// which may be all it carries, and streams moved up to 90% of that sit
	// on the edge a key frame tips (up at 85%, down past 90% of the
	// estimate or 90% of the capacity: a band between the two).
	upShare = 0.85
	// ProbeLength is how long a probe's padding is sent (unless the link
	// queues under it), its bucket allowance over its goal (ProbeRate):
	// what it shows, a shaper's bucket did not make.
	ProbeLength = time.Second
	// provenFor: a probe's showing stands this long for moves up.
	provenFor = 10 * time.Second
	// REMB links move up after this long fitting.
	rembHold       = 3 * time.Second
	probeAfterDown = 2 * time.Second
	// probeAfterUp: after a move up, the delay shows within this long
	// whether the link carries it.
	probeAfterUp = 500 * time.Millisecond
	// upHeld: a move up followed by one down within this long did not
	// hold (a shaper's bucket deeper than a probe allows for let it
	// through, say), unless the link narrowed (down): the next probe waits
	// upBackoff (from firstUpBackoff doubling up to maxUpBackoff).
	upHeld         = 5 * time.Second
	firstUpBackoff = 2 * time.Second
	maxUpBackoff   = 4 * time.Second
	probeBackoff   = time.Second
	maxBackoff     = 2 * time.Second // (a failed probe stops at 50 ms of queue: it costs little)
	// retransmitShare of the estimate is kept for retransmissions at least.
	retransmitShare = 0.1
	// pauseAfter: a stream whose lowest layer does not fit pauses after
	// this long.
	pauseAfter = 2500 * time.Millisecond
	// refitAfter: a stream that has not fitted fits again once it has for
	// this long.
	refitAfter = time.Second
	// peakWindow: what the link carries is the peak of its estimate over
	// this long.
	peakWindow = 3 * time.Second
	// upGrace: after resuming, its key frame queues for a moment without
	// cutting the estimate.
	upGrace = time.Second
	// holdShare: a stream keeps its lowest layer while this share of the
	// link's capacity has room for it (retransmissions need the rest).
	holdShare = 0.9
	// probeStep: a probe's goal over the estimate, or over what the last
	// probe measured if less and within measuredFor (an estimate creeps
	// up while nothing queues); after n successes in a row,
	// probeStep^(n+1), n at most maxProbeSteps (no doubling: two probes a
	// shaper's bucket let through in a row happen, and a probe at twice
	// the link fills its queue before the feedback stops it).
	maxProbeSteps = 3
	measuredFor   = 20 * time.Second
	probeStep     = 1.15
	measureMargin = 1.05
)

// linkStream is what a Link keeps of one stream from round to round.
type linkStream struct {
	pauseSince time.Duration // since when its lowest layer has not fitted (-1: it fits)
	fitSince   time.Duration // since when it has fitted again (-1: it does not)
	structure  int           // decode targets of the structure its target counts in (0: none yet)
	cost       float64       // what it cost at its target after the last round
	costlier   time.Duration // when its sender's new structure made that cost more
	// silentSince: since when its sender has been silent (-1: sending);
	// then, its target and what the link showed it carries (shown), and
	// whether the link has lost packets since (lossy).
	silentSince  time.Duration
	silentTarget int
	shown        float64
	lossy        bool
	hidden       bool // Input.Hidden, as the last round saw it
}

// costlierFor: a stream its sender's new structure made costlier is served
// last, without a hold, for this long after (restructure).
const costlierFor = pauseAfter

// NewLink is a link with no estimate yet: its streams go as they are.
func NewLink() *Link {
	return &Link{est: NewEstimator(), peaks: Window{Span: peakWindow}, delivered: Window{Span: deliveredWindow},
		backoff: probeBackoff, upBackoff: firstUpBackoff, lastUp: -upHeld, lastDown: -upHeld}
}

// Estimator is the link's send-side estimator.
func (l *Link) Estimator() *Estimator { return l.est }

// OnFeedback takes the acks of one leg's feedback (leg: any key of the
// caller's) at now: merged with the other legs' in arrival order, they go
// to the estimator.
func (l *Link) OnFeedback(leg any, now time.Duration, acks []Ack) {
	l.merge.add(leg, now, acks)
	l.est.OnAcks(now, l.merge.ready(now))
}

// ForgetLeg drops what the link knew of a leg's feedback (it left).
func (l *Link) ForgetLeg(leg any) { l.merge.forget(leg) }

// Input is a round's view of one stream of the link.
type Input struct {
	Stream
	REMB     float64 // its receiver's smoothed REMB for this leg (bits/s); 0: none
	CanProbe bool    // padding can be sent on its leg (RTX, transport-wide numbers)
	// Silent: its sender has sent no video for a while (a camera turned
	// off); what the link showed it carries is kept for its return.
	Silent bool
	// Hidden: its receiver is not to get its video now (last-N: its
	// sender is not among the receiver's N most recent speakers): it is
	// paused, costing its audio only, and given a target anew when shown.
	Hidden bool
}

// Decision is a stream's target after a round, and why it moved.
type Decision struct {
	Target int
	Reason string // "" when it did not move
}

// ProbePlan asks the caller to send padding at Rate bits/s on top of the
// media for Length on leg Stream (while Link.Padding says so); Goal is
// what the probe is to show the link carries (it is sent a shaper
// bucket's allowance over it, ProbeRate).
type ProbePlan struct {
	Stream     int
	Rate, Goal float64
	Length     time.Duration
}

// Estimate is the link's estimate and where it comes from ("twcc",
// "remb"); false while there is none.
func (l *Link) Estimate(in []Input) (float64, string, bool) {
	if e, ok := l.est.Estimate(); ok {
		return e, "twcc", true
	}
	var remb float64
	for _, s := range in {
		remb += s.REMB
	}
	return remb, "remb", remb > 0
}

// Round decides the streams' targets at now.
func (l *Link) Round(now time.Duration, in []Input) ([]Decision, *ProbePlan) {
	l.resize(in)
	view, hiding := l.hide(in)
	out, plan := l.round(now, view)
	l.show(in, hiding, out)
	return out, plan
}

// hide is in as the allocation sees it: a hidden stream costs its audio
// only and is not adapted (its target EveryLayer, as it is: nothing to
// adapt); and which streams hide or show in this round (hiding: ±1).
func (l *Link) hide(in []Input) ([]Input, []int) {
	view, hiding := in, make([]int, len(in))
	for i, s := range in {
		st := &l.streams[i]
		switch {
		case s.Hidden && !st.hidden:
			hiding[i] = 1
		case !s.Hidden && st.hidden:
			hiding[i] = -1
		}
		st.hidden = s.Hidden
		if !s.Hidden {
			continue
		}
		if &view[0] == &in[0] {
			view = slices.Clone(in)
		}
		view[i].Stream = Stream{Other: s.Other, Priority: s.Priority}
		l.targets[i] = EveryLayer // shown again, a target anew ("first estimate")
	}
	return view, hiding
}

// show makes a hidden stream's decision paused (said once, as it hides),
// and one shown again this round move from the pause (to its first
// estimate's target, or as it is before the link has an estimate).
func (l *Link) show(in []Input, hiding []int, out []Decision) {
	for i := range in {
		switch {
		case in[i].Hidden:
			out[i] = Decision{Target: Paused}
			if hiding[i] > 0 {
				out[i].Reason = "last-N: not among the most recent speakers"
			}
		case hiding[i] < 0 && out[i].Reason == "":
			out[i] = Decision{Target: l.targets[i], Reason: "last-N: among the most recent speakers again"}
		}
	}
}

// round is Round on the allocation's view of the streams.
func (l *Link) round(now time.Duration, in []Input) ([]Decision, *ProbePlan) {
	out := make([]Decision, len(in))
	for i := range in {
		out[i].Target = l.targets[i]
	}
	l.restructure(now, in, out)
	l.est.OnAcks(now, l.merge.ready(now)) // what waited long enough for the other legs
	l.silence(now, in, out)
	streams := make([]Stream, len(in))
	for i, s := range in {
		streams[i] = s.Stream
		streams[i].Current = l.targets[i]
	}
	est, source, ok := l.Estimate(in)
	if !ok {
		return out, nil // no estimate yet: as they are
	}
	l.judgeProbe(now)
	restructuring := l.restructuring(now)
	want := l.want(now, est, streams)
	l.budget = headroom * est
	up := false
	// While the targets fit, none goes down: an allocation that would
	// give another stream (a paused one) room waits for that stream's
	// move up (moveUp moves both).
	fits := Total(streams, l.targets) <= l.budget
	pausing := false
	for i := range in {
		cur := l.targets[i]
		switch {
		case cur == EveryLayer && len(in[i].Rates) > 0:
			l.move(i, want[i], fmt.Sprintf("first estimate %.0f kbit/s (%s)", est/1000, source), out)
		case lower(want[i], cur) && !fits:
			why := fmt.Sprintf("estimate %.0f kbit/s (%s) below what the layers need", est/1000, source)
			if want[i] == Paused {
				why = fmt.Sprintf("estimate %.0f kbit/s (%s): the lowest layer does not fit", est/1000, source)
			}
			if restructuring {
				why = "a sender's new structure costs more: " + why
			}
			l.move(i, want[i], why, out)
			// A sender's new structure is no news of the link: what the
			// last probe showed stands, and no move up is undone.
			if restructuring {
				l.lastDown = now
			} else {
				l.down(now)
			}
			pausing = pausing || want[i] == Paused
		case lower(cur, want[i]):
			up = true
		}
	}
	if pausing {
		l.resumeInItsPlace(now, streams, out)
	} else if up && l.resumeByTrade(now, streams, out) {
		up = false
	}
	if up {
		l.moveUp(now, est, source, streams, want, out)
	} else {
		l.upSince = -1
	}
	for i, s := range streams {
		l.streams[i].cost = s.cost(l.targets[i])
	}
	l.bucket.SetRate(now, max(l.capacity-Total(streams, l.targets), retransmitShare*l.capacity))
	return out, l.plan(now, in, streams, est, source)
}

// want is the allocation of est: within the headroom; but a stream keeps
// its lowest layer while the link's capacity has room for it (the
// estimate's recent peak, what the link delivers now or did under the
// last probe: an estimate saws between 85% of the capacity and it, and a
// loss cut takes it lower), and pauses only when that has lasted
// pauseAfter (a pause costs
// a key frame and shows; a dip of the estimate should not). A link losing
// more than a tenth is overfilled now: what it delivers is what it
// carries, and a stream that does not fit in that pauses at once; one
// losing more than 2% is full: what it delivers is what it carries, and a
// stream that does not fit pauses after pauseAfter.
func (l *Link) want(now time.Duration, est float64, streams []Stream) []int {
	capacity, overfilled := l.capacityNow(now, est)
	// A stream its sender's new structure made costlier is served last,
	// in what the link carried before the change (the budget if more, but
	// no more than a tenth over it: an estimate at the top of its saw
	// reads a tenth over a shaper's rate, and a costlier stream let in on
	// it filled a link 99% and lost both streams' packets at the next key
	// frame; nor more than the capacity's share it holds streams in: the
	// link may have narrowed since), and not held: the others keep what
	// they had as far as it goes, and the link never carried the new cost.
	costlier := make([]bool, len(streams))
	for i := range streams {
		costlier[i] = l.streams[i].isCostlier(now)
	}
	budget := headroom * est
	if slices.Contains(costlier, true) {
		streams = slices.Clone(streams)
		for i := range streams {
			if costlier[i] {
				streams[i].Current = Paused
			}
		}
		budget = min(max(budget, l.carriedBefore), costlierShare*l.carriedBefore, holdShare*capacity)
	}
	want := Allocate(budget, streams)
	l.capacity = capacity
	tight := Allocate(holdShare*capacity, streams)
	for i := range want {
		st := &l.streams[i]
		if want[i] == Paused && tight[i] != Paused && !costlier[i] {
			want[i] = tight[i]
		}
		if costlier[i] && want[i] != Paused && l.targets[i] != Paused {
			st.costlier = -costlierFor // it fitted: a stream like any other from now on
		}
		if l.targets[i] == Paused {
			st.pauseSince, st.fitSince = -1, -1
			continue
		}
		if want[i] != Paused {
			// Fitting for a round is no end to not fitting: the capacity
			// reads high for a moment (a shaper's bucket passing a burst
			// in what arrives), and a link overfilled by a few percent
			// would hold two lowest layers for good.
			if st.fitSince < 0 {
				st.fitSince = now
			}
			if now-st.fitSince >= refitAfter {
				st.pauseSince = -1
			}
			continue
		}
		st.fitSince = -1
		if st.pauseSince < 0 {
			st.pauseSince = now
		}
		if now-st.pauseSince < pauseAfter && !overfilled && !costlier[i] {
			want[i] = min(l.targets[i], 0) // hold the lowest layer meanwhile
			if l.targets[i] == EveryLayer {
				want[i] = 0
			}
		}
	}
	return want
}

// capacityNow is what the link carries, as this round sees it (the
// estimate's recent peak, what it delivers now, what the last probe
// measured; what it delivers when it loses or queues), and whether it is
// overfilled (losing more than a tenth).
func (l *Link) capacityNow(now time.Duration, est float64) (capacity float64, overfilled bool) {
	capacity = l.peak(now, est)
	capacity = max(capacity, l.est.Acked()) // what it delivers now (all of it, when it queues)
	if l.measured > 0 && now-l.measuredAt < measuredFor && l.measuredAt > l.lastDown {
		capacity = max(capacity, l.measured) // what the last probe saw arrive, since the last move down
	}
	// (Of what was sent since the last move down: the loss that move
	// answered is not counted again.)
	loss := l.est.LossSince(l.lastDown)
	overfilled = loss > lossHigh
	switch {
	case overfilled:
		l.peaks.Reset() // what it carried before is not what it carries now
		capacity = max(est, 0.95*l.est.Acked())
	case loss > lossLow:
		// Losing a little: full, what arrives is what it carries (a
		// stream that does not fit in that pauses after pauseAfter; the
		// estimate holds at such a loss, its peak tells nothing).
		capacity = max(est, l.est.Acked())
	case l.est.Usage() == Overuse:
		// Queueing now: what it delivers is what it carries (a link that
		// narrowed under streams that fitted it has the estimate's peak
		// of before for 3 s more; holding through them a stream that
		// does not fit keeps the queue full).
		capacity = max(est, l.est.Acked())
	}
	return capacity, overfilled
}

// peak is the highest estimate of the last peakWindow (est now included).
func (l *Link) peak(now time.Duration, est float64) float64 {
	l.peaks.Add(now, est)
	p, _ := l.peaks.Max()
	return p
}

// moveUp takes the streams up towards want where the link showed it
// carries them: as far as the last probe's success shows room for (TWCC),
// or to want once the estimate has fitted it for a while (REMB).
func (l *Link) moveUp(now time.Duration, est float64, source string, streams []Stream, want []int, out []Decision) {
	switch source {
	case "twcc":
		if l.proven <= 0 || now-l.provenAt > provenFor {
			return
		}
		// As far as the probe showed room: a stream may go down for
		// another's move up (a paused one resuming takes a higher layer's
		// room), never for nothing.
		// (One allocation of the lower of the two, not the lower target of
		// each allocation: an allocation is no monotone function of its
		// budget, a paused stream's lowest layer can take a higher one's
		// place.)
		budget := upShare * min(est, l.proven)
		next := Allocate(budget, streams)
		if !raises(l.targets, next) || takesAPicture(l.targets, next) {
			return
		}
		l.raise(now, streams, next, true, fmt.Sprintf("probe showed %.0f kbit/s", l.proven/1000), out)
	case "remb":
		if l.upSince < 0 {
			l.upSince = now
		}
		if now-l.upSince < rembHold {
			return
		}
		for i := range want {
			if lower(l.targets[i], want[i]) {
				l.move(i, want[i], fmt.Sprintf("estimate %.0f kbit/s (remb) fitted %v", est/1000, rembHold), out)
			}
		}
		l.upSince = -1
	}
}

// resumeInItsPlace gives the room a stream's pause leaves to a stream
// paused before whose lowest layer fits it (one whose lowest layer costs
// more than it did, a sender's new structure, pauses; another's cheaper
// one can show): the link carried the one pausing until now, so no probe
// need show it. Its lowest layer only, as far as 90% of the link's
// capacity has room beside the targets now.
func (l *Link) resumeInItsPlace(now time.Duration, streams []Stream, out []Decision) {
	next := slices.Clone(l.targets)
	for i := range streams {
		if l.targets[i] != Paused || out[i].Reason != "" {
			continue // showing, or pausing now
		}
		next[i] = 0
		if Total(streams, next) > holdShare*l.capacity {
			next[i] = Paused
			continue
		}
		l.est.Grace(now + upGrace)
		l.move(i, 0, fmt.Sprintf("room a pause left, of %.0f kbit/s", l.capacity/1000), out)
	}
}

// resumeByTrade resumes a paused stream where what the streams take now
// has room for its lowest layer in the allocation's order (every lowest
// layer before any higher one): a higher layer of another's gives way, and
// no probe need show the link carries what costs no more than now, but
// not within upHeld of a move up (one a shaper's bucket led is undone by a
// move down, costing no key frame; a resumption undone costs two).
func (l *Link) resumeByTrade(now time.Duration, streams []Stream, out []Decision) bool {
	if now-l.lastUp < upHeld {
		return false
	}
	after := slices.Clone(streams) // in the order the next rounds allocate in
	for i := range after {
		after[i].Current = 0
	}
	next := Allocate(Total(streams, l.targets), after)
	if !resumes(l.targets, next) || takesAPicture(l.targets, next) {
		return false
	}
	l.raise(now, streams, next, false, "lowest layers first: a higher layer's room", out)
	return true
}

// raises says whether next moves a stream up from targets.
func raises(targets, next []int) bool {
	for i := range next {
		if lower(targets[i], next[i]) {
			return true
		}
	}
	return false
}

// takesAPicture says whether next pauses a stream showing in targets.
// Never a picture for another's: the one showing would pause (its
// receiver sees it go) and the other start with a key frame, for no more
// video than before.
func takesAPicture(targets, next []int) bool {
	for i := range next {
		if next[i] == Paused && targets[i] != Paused {
			return true
		}
	}
	return false
}

// raise moves the streams to next as one move up: a resumed stream's key
// frame queues without cutting the estimate. The next probe waits (up)
// until the delay shows whether the link carries it, unless a probe
// showed it does (shown) and no key frame is coming: then the next probe
// goes at once, on top of it (a link that cleared is back at the top a
// probe's judgement sooner per step: within 8 s of the clearing in
// TestLinkClearsAtAnyPhase, not 9.5; a move up that does not hold queues
// under it and stops it).
func (l *Link) raise(now time.Duration, streams []Stream, next []int, shown bool, reason string, out []Decision) {
	l.carried = Total(streams, l.targets)
	resumed := false
	for i, t := range next {
		if t == l.targets[i] {
			continue
		}
		if l.targets[i] == Paused {
			l.est.Grace(now + upGrace)
			resumed = true
		}
		l.move(i, t, reason, out)
	}
	wait := probeAfterUp
	if shown && !resumed {
		wait = 0
	}
	l.up(now, wait)
}

// up notes a move up: the next probe waits wait (for the delay to show
// whether the link carries it); one that held a while resets the
// back-off.
func (l *Link) up(now, wait time.Duration) {
	if now-l.lastUp > upHeld && now-l.lastDown > upHeld {
		l.upBackoff = firstUpBackoff
	}
	l.lastUp, l.next = now, max(l.next, now+wait)
}

func lowest(a, b int) int {
	if lower(a, b) {
		return a
	}
	return b
}

// plan asks for a probe when a stream could go higher than the link has
// shown it carries, on a leg that can send padding, no probe is under way,
// the link is neither losing nor queueing, and the back-off is over. Its
// goal is what the streams need with one layer more (the one the
// allocation would raise next), with the headroom they leave, but no more
// than probeStep over the estimate or the last probe's measure (or what
// the link carries now, if more: an estimate cut below it would never
// let a probe go over what is sent): a shaper's bucket lets a probe some
// way over its rate through unseen, and a probe far over it fills the
// queue the media share before the feedback shows it. (What the link
// delivered when it overfilled is no bound: a bucket's burst and the
// queue draining are in it.) Successes in a row take longer steps
// (more than a layer if need be; the link may have cleared): 15%, 32%,
// 52%, then 75% each. A probe stops once the link queues under it.
func (l *Link) plan(now time.Duration, in []Input, streams []Stream, est float64, source string) *ProbePlan {
	if source != "twcc" || l.probing || now < l.next || now-l.lastDown < probeAfterDown ||
		l.est.Loss() > lossLow || l.est.Usage() == Overuse {
		return nil
	}
	leg := slices.IndexFunc(in, func(s Input) bool { return s.CanProbe })
	cur, full := Total(streams, l.targets), Total(streams, Top(streams))
	if leg < 0 || cur >= full {
		return nil
	}
	// One layer more, with the headroom (and a little over: a probe's
	// measure comes out a little under its goal, and must still show room).
	next := stepUp(streams, l.targets)
	goal := Total(streams, next) / upShare * measureMargin
	base := est
	if l.measured > 0 && now-l.measuredAt < measuredFor {
		base = min(base, l.measured)
	}
	base = max(base, cur) // what it carries now, whatever the estimate says
	switch {
	case resumes(l.targets, next) && l.successes == 0:
		// To what a paused stream's resumption needs, at once (a probe
		// stops at 50 ms of queue), and a step over what the streams take
		// now at least (never over the estimate for its own sake: a goal
		// over the link fails, and cuts the estimate for the next one to
		// fail again). After a success, as long a step as any probe's: a
		// resumption's need is no bound on a link that may have cleared
		// (232, 312, then 329 kbit/s to resume a stream, 577 after: back
		// at the top 11 s after a simulated link cleared, not 8).
		goal = min(max(goal, probeStep*cur), full/upShare*measureMargin)
	case l.successes == 0:
		goal = min(goal, probeStep*base)
	default:
		step := math.Pow(probeStep, float64(1+min(l.successes, maxProbeSteps)))
		goal = min(max(goal, step*base), full/upShare*measureMargin)
	}
	if goal <= cur || (l.proven >= goal && now-l.provenAt < time.Second) {
		return nil // nothing to show, or shown a moment ago
	}
	l.probing = true
	// A failed probe cuts the estimate no lower than what the media took
	// without a queue before it: after a move up not yet held for upHeld,
	// what they took before that (a move up a probe a shaper's bucket let
	// through led may overfill the link, and the next probe's queue is
	// then the media's as much as its own).
	sending := cur
	if now-l.lastUp < upHeld {
		sending = min(cur, l.carried)
	}
	l.est.Probe(now, now+ProbeLength, goal, sending)
	return &ProbePlan{Stream: leg, Rate: ProbeRate(goal, ProbeLength) - cur, Goal: goal, Length: ProbeLength}
}

// resumes says whether next resumes a stream paused in targets.
func resumes(targets, next []int) bool {
	for i := range targets {
		if targets[i] == Paused && next[i] != Paused {
			return true
		}
	}
	return false
}

// stepUp is targets one step up: the cheaper of one layer more for the
// stream with the lowest target, showing video first, and the lowest layer
// of the paused stream whose lowest costs least (one that never fits must
// not keep the others waiting), with the others at theirs, as Allocate
// serves every
// lowest layer before any higher one (a higher layer gives way to it: on a
// link with room for the lowest layers but not a layer more, a stream
// paused for a moment would otherwise wait for ever behind probes for
// another's next layer).
func stepUp(streams []Stream, targets []int) []int {
	up := oneLayerMore(streams, targets)
	i := -1 // the paused stream whose lowest layer costs least
	for j, s := range streams {
		if len(s.Rates) > 0 && targets[j] == Paused && (i < 0 || s.Rates[0] < streams[i].Rates[0]) {
			i = j
		}
	}
	if i >= 0 {
		resume := slices.Clone(targets)
		for j, o := range streams {
			if len(o.Rates) > 0 && (j == i || targets[j] >= 0) {
				resume[j] = 0
			}
		}
		if Total(streams, resume) < Total(streams, up) {
			return resume
		}
	}
	return up
}

// oneLayerMore is targets with one layer more for the stream with the
// lowest target, showing video first.
func oneLayerMore(streams []Stream, targets []int) []int {
	next := -1
	for _, showing := range []bool{true, false} {
		for i, s := range streams {
			if len(s.Rates) == 0 || !lower(targets[i], s.top()) || (targets[i] != Paused) != showing {
				continue
			}
			if next < 0 || lower(targets[i], targets[next]) {
				next = i
			}
		}
		if next >= 0 {
			break
		}
	}
	up := slices.Clone(targets)
	if next >= 0 {
		up[next] = nextTarget(up[next])
	}
	return up
}

// down notes a move down: what a probe showed no longer holds; a move up
// that did not hold (down within upHeld, the link still delivering what
// the streams took before it) puts the next probe off, longer each time.
// A link delivering less than that narrowed: news of the link, not of
// the move up, and the probe after probeAfterDown measures it (put off,
// a stream whose lowest layer fitted the narrower link paused before a
// probe showed it did).
func (l *Link) down(now time.Duration) {
	if l.lastDown == now {
		return // one move down a round, however many streams went down
	}
	l.lastDown, l.proven, l.successes = now, 0, 0
	if now-l.lastUp < upHeld && l.est.Acked() >= narrowedShare*l.carried {
		l.next = max(l.next, now+l.upBackoff)
		l.upBackoff = min(2*l.upBackoff, maxUpBackoff)
	}
}

// judgeProbe takes the last probe's judgement once it is in (the
// estimator has set the estimate to what it measured).
func (l *Link) judgeProbe(now time.Duration) {
	if !l.probing || l.est.Probing() {
		return
	}
	l.probing = false
	r := l.est.LastProbe()
	if r.Measured > 0 {
		l.measured, l.measuredAt = r.Measured, now
	}
	if r.Success {
		l.proven, l.provenAt = r.Measured, now
	}
	if r.Success && !r.Full {
		l.successes++
		l.backoff, l.next = probeBackoff, now
		return
	}
	// Failed, or showed the link full: the next probe waits, and steps
	// from what it measured.
	l.successes = 0
	l.next = now + l.backoff
	l.backoff = min(2*l.backoff, maxBackoff)
}

func (l *Link) move(i, target int, reason string, out []Decision) {
	l.targets[i] = target
	out[i] = Decision{Target: target, Reason: reason}
}

// restructure keeps a stream's target where it was counted from the top
// when its sender's structure changes its number of decode targets, as the
// new structure's rates are (inherit): temporal layers come and go at the
// bottom, so L1T3's 7.5 fps target is L1T2's lowest, and L1T2's lowest
// L1T3's middle one. Counted from the bottom, as the data plane reads an
// index, a receiver at L1T3's middle target would get all of L1T2, twice
// the frames its link carried. (Where the new structure has nothing that
// low, L1T3's lowest becoming L1T2's, the stream costs more than its link
// carried: want serves it last in what the link carried before, without
// the hold a dip of the estimate gets.)
func (l *Link) restructure(now time.Duration, in []Input, out []Decision) {
	for i, s := range in {
		st := &l.streams[i]
		n, was := len(s.Rates), st.structure
		if n == 0 || n == was {
			continue
		}
		st.structure = n
		t := l.targets[i]
		if was == 0 || t < 0 {
			continue
		}
		if moved := min(max(t+n-was, 0), n-1); moved != t {
			l.move(i, moved, fmt.Sprintf("the sender's structure has %d decode targets, had %d: target %d counted from the top", n, was, was-1-t), out)
		}
		if s.cost(l.targets[i]) > costlierShare*st.cost {
			st.costlier, l.carriedBefore = now, l.carriedLastRound()
		}
	}
}

// silence keeps a silent stream's place (its sender sends no video: a
// camera turned off): what the link showed it carries when the stream
// fell silent (its estimate, what it delivered over the last
// deliveredWindow with the headroom), and the stream's target then. When
// the stream sends again, it is back in its place at once, like one that
// never left, unless the link lost packets meanwhile: an estimate cut
// while the link carried less (a CPU stall's queue on a link with room;
// app-limited, it cannot grow past 1.5 times what arrives) is no news
// that the link no longer carries the stream, and a probe that has to
// show it again can take seconds (or fail on a busy receiver: the camera
// back on stayed paused for 10 s on a Firefox page). A link that really
// narrowed shows it under the stream within a round trip, and the usual
// move down follows.
func (l *Link) silence(now time.Duration, in []Input, out []Decision) {
	l.delivered.Add(now, l.est.Acked())
	for i, s := range in {
		st := &l.streams[i]
		switch {
		case s.Silent && st.silentSince < 0:
			est, _ := l.est.Estimate()
			carried, _ := l.delivered.Max()
			st.silentSince, st.silentTarget, st.lossy = now, l.targets[i], false
			st.shown = max(est, carried/headroom)
		case s.Silent:
			st.lossy = st.lossy || l.est.Loss() > lossLow
		case st.silentSince >= 0:
			st.silentSince = -1
			if st.lossy {
				continue
			}
			l.est.Restore(now, st.shown)
			l.est.Grace(now + upGrace) // its key frame
			if st.silentTarget != EveryLayer && lower(l.targets[i], st.silentTarget) {
				l.move(i, st.silentTarget, fmt.Sprintf("back from silence in its place (the link showed %.0f kbit/s)", st.shown/1000), out)
			}
		}
	}
}

// deliveredWindow: what a link carried before a stream fell silent is
// the most it delivered over this long (a sender is silent once it has
// sent nothing for a while: Input.Silent).
const deliveredWindow = 5 * time.Second

// carriedLastRound is what the streams cost at their targets after the
// last round.
func (l *Link) carriedLastRound() float64 {
	var sum float64
	for _, st := range l.streams {
		sum += st.cost
	}
	return sum
}

// restructuring says whether a stream is costlier since its sender's new
// structure (costlierFor).
func (l *Link) restructuring(now time.Duration) bool {
	return slices.ContainsFunc(l.streams, func(st linkStream) bool { return st.isCostlier(now) })
}

// isCostlier says whether the stream's sender's new structure made it
// costlier within costlierFor of now.
func (st linkStream) isCostlier(now time.Duration) bool { return now-st.costlier < costlierFor }

// narrowedShare: a link delivering less than this share of what the
// streams took before a move up narrowed (encoders send a little under
// their layers' rates: the share keeps a failed move up from passing as
// a narrowing).
const narrowedShare = 0.8

// costlierShare: a new structure's stream costs more than it did above
// this share (its rates are the old ones, counted from the top, until
// measured: the same at the same place).
const costlierShare = 1.1

// resize keeps a target per stream; a new stream starts as it is.
func (l *Link) resize(in []Input) {
	for len(l.targets) < len(in) {
		l.targets = append(l.targets, EveryLayer)
		l.streams = append(l.streams, linkStream{pauseSince: -1, fitSince: -1, costlier: -costlierFor, silentSince: -1})
	}
	l.targets, l.streams = l.targets[:len(in)], l.streams[:len(in)]
}

// Forget drops stream i's place (its leg left): the others move up one.
func (l *Link) Forget(i int) {
	if i < len(l.targets) {
		l.targets = slices.Delete(l.targets, i, i+1)
		l.streams = slices.Delete(l.streams, i, i+1)
	}
}

// Padding says whether a planned probe's padding should go on: not once
// the link queues under it (what it carries is shown already; more only
// fills the queue the media share).
func (l *Link) Padding() bool { return l.probing && !l.est.ProbeQueueing() }

// Retransmit takes bytes from the retransmission budget: false when the
// link has no room for them now (the receiver asks again). Before the
// link has an estimate, nothing holds them back.
func (l *Link) Retransmit(now time.Duration, bytes int) bool {
	return l.budget == 0 || l.bucket.Take(now, bytes)
}

// RetransmitFits says whether Retransmit would take bytes now.
func (l *Link) RetransmitFits(now time.Duration, bytes int) bool {
	return l.budget == 0 || l.bucket.Fits(now, bytes)
}

// Budget is what the streams' media were given, bits/s (0: none yet).
func (l *Link) Budget() float64 { return l.budget }

// lower: target a is below b (Paused below every layer, EveryLayer above).
func lower(a, b int) bool { return rank(a) < rank(b) }

func rank(t int) int {
	switch t {
	case Paused:
		return -1
	case EveryLayer:
		return 1 << 30
	}
	return t
}

func nextTarget(t int) int {
	if t == Paused {
		return 0
	}
	return t + 1
}
