package ratecontrol

import (
	"math"
	"time"
)

// Usage is what the delay gradient says of the link: a queue building
// (over), draining (under), or neither.
type Usage int

const (
	Normal Usage = iota
	Overuse
	Underuse
)

func (u Usage) String() string { return [...]string{"normal", "overuse", "underuse"}[u] }

// The delay-based detector is Google Congestion Control's
// (draft-ietf-rmcat-gcc-02, and libwebrtc's trendline estimator, which
// replaced the draft's Kalman filter): packets are grouped by send time
// into bursts; between consecutive groups the delay variation d =
// (arrival gap - send gap) accumulates, is smoothed, and the slope of its
// trend over the last groups, scaled, is compared with a threshold that
// adapts to it. A trend above the threshold for a while is overuse.
const (
	groupLength     = 5 * time.Millisecond // packets sent within this of a group's first are one burst
	trendWindow     = 20                   // groups the trend's slope is fitted over
	trendSmoothing  = 0.9
	trendGain       = 4.0
	overuseTime     = 10 * time.Millisecond
	thresholdStart  = 12.5 // ms
	thresholdMin    = 6.0
	thresholdMax    = 600.0
	thresholdUp     = 0.0087
	thresholdDown   = 0.039
	thresholdOffset = 15.0 // a trend this far past the threshold does not move it
)

// sendGroup is a burst of packets sent together.
type sendGroup struct {
	firstSent, lastSent       time.Duration
	firstArrived, lastArrived time.Duration
	size                      int
}

func newGroup(a Ack) sendGroup {
	return sendGroup{firstSent: a.Sent, lastSent: a.Sent, firstArrived: a.Arrived, lastArrived: a.Arrived, size: a.Size}
}

// delayDetector is the overuse detector on a stream of acks in arrival
// order.
type delayDetector struct {
	cur, prev   sendGroup
	hasCur      bool
	hasPrev     bool
	deltas      int
	firstArr    time.Duration
	accumulated float64 // ms
	smoothed    float64
	history     [][2]float64 // (arrival ms since the first, smoothed delay)
	trend       float64
	threshold   float64
	lastUpdate  time.Duration
	overTime    time.Duration // -1: not over
	overCount   int
	usage       Usage
}

func newDelayDetector() *delayDetector {
	return &delayDetector{threshold: thresholdStart, overTime: -1, lastUpdate: -1}
}

// add takes one received packet.
func (d *delayDetector) add(a Ack) {
	if !d.hasCur {
		d.cur, d.hasCur = newGroup(a), true
		return
	}
	if a.Sent < d.cur.firstSent {
		return // sent before the group: reordered, out of the gradient
	}
	if a.Sent-d.cur.firstSent <= groupLength || d.burst(a) {
		d.cur.lastSent, d.cur.lastArrived = max(d.cur.lastSent, a.Sent), max(d.cur.lastArrived, a.Arrived)
		d.cur.size += a.Size
		return
	}
	if d.hasPrev {
		sendGap := d.cur.lastSent - d.prev.lastSent
		arrivalGap := d.cur.lastArrived - d.prev.lastArrived
		if arrivalGap-sendGap > 3*time.Second || arrivalGap < 0 {
			d.reset() // the receiver's clock or the path jumped: start over
		} else {
			d.update(ms(arrivalGap-sendGap), ms(sendGap), d.cur.lastArrived)
		}
	}
	d.prev, d.hasPrev = d.cur, true
	d.cur = newGroup(a)
}

// burst: a packet that arrives within 5 ms of the group's last with a
// shorter gap than it was sent with belongs to the group (it queued
// behind it: one burst through the network).
func (d *delayDetector) burst(a Ack) bool {
	arrivalGap := a.Arrived - d.cur.lastArrived
	sendGap := a.Sent - d.cur.lastSent
	return sendGap == 0 || (arrivalGap-sendGap < 0 && arrivalGap <= groupLength && a.Arrived-d.cur.firstArrived < 100*time.Millisecond)
}

func (d *delayDetector) reset() {
	*d = delayDetector{threshold: d.threshold, overTime: -1, lastUpdate: d.lastUpdate}
}

// update is the trendline estimator and the overuse detector on one
// delay variation (ms) between groups.
func (d *delayDetector) update(variation, sendGap float64, arrived time.Duration) {
	d.deltas = min(d.deltas+1, 1000)
	if len(d.history) == 0 && d.firstArr == 0 {
		d.firstArr = arrived
	}
	d.accumulated += variation
	d.smoothed = trendSmoothing*d.smoothed + (1-trendSmoothing)*d.accumulated
	d.history = append(d.history, [2]float64{ms(arrived - d.firstArr), d.smoothed})
	if len(d.history) > trendWindow {
		d.history = d.history[1:]
	}
	trend := d.trend
	if len(d.history) == trendWindow {
		if s, ok := slope(d.history); ok {
			trend = s
		}
	}
	d.detect(trend, sendGap, arrived)
}

func (d *delayDetector) detect(trend, sendGap float64, now time.Duration) {
	if d.deltas < 2 {
		d.usage, d.trend = Normal, trend
		return
	}
	modified := float64(min(d.deltas, 60)) * trend * trendGain
	switch {
	case modified > d.threshold:
		if d.overTime < 0 {
			d.overTime = time.Duration(sendGap / 2 * float64(time.Millisecond))
		} else {
			d.overTime += time.Duration(sendGap * float64(time.Millisecond))
		}
		d.overCount++
		if d.overTime > overuseTime && d.overCount > 1 && trend >= d.trend {
			d.overTime, d.overCount, d.usage = 0, 0, Overuse
		}
	case modified < -d.threshold:
		d.overTime, d.overCount, d.usage = -1, 0, Underuse
	default:
		d.overTime, d.overCount, d.usage = -1, 0, Normal
	}
	d.trend = trend
	d.adapt(modified, now)
}

// adapt moves the threshold towards the trend: slowly up, faster down,
// so that a competing flow's steady delay does not starve us and a
// sudden queue still shows.
func (d *delayDetector) adapt(modified float64, now time.Duration) {
	if d.lastUpdate < 0 {
		d.lastUpdate = now
	}
	abs := math.Abs(modified)
	if abs > d.threshold+thresholdOffset {
		d.lastUpdate = now
		return
	}
	k := thresholdUp
	if abs < d.threshold {
		k = thresholdDown
	}
	dt := min(ms(now-d.lastUpdate), 100)
	d.threshold = min(max(d.threshold+k*(abs-d.threshold)*dt, thresholdMin), thresholdMax)
	d.lastUpdate = now
}

// slope is the least-squares slope of y over x.
func slope(points [][2]float64) (float64, bool) {
	var sx, sy float64
	for _, p := range points {
		sx += p[0]
		sy += p[1]
	}
	mx, my := sx/float64(len(points)), sy/float64(len(points))
	var num, den float64
	for _, p := range points {
		num += (p[0] - mx) * (p[1] - my)
		den += (p[0] - mx) * (p[0] - mx)
	}
	if den == 0 {
		return 0, false
	}
	return num / den, true
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
