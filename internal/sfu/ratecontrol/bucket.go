package ratecontrol

import "time"

// Bucket is a token bucket in bytes: what a link's retransmissions may
// take, refilled at a rate, holding at most 500 ms of it (and a packet).
type Bucket struct {
	rate   float64 // bits/s
	tokens float64 // bytes
	last   time.Duration
}

// bucketDepth is how much of the rate the bucket holds: loss comes in
// bursts (a key frame's packets at a full queue), and a receiver NACKs a
// packet about once a round trip, ten times, then gives up; at a narrow
// link's spare rate a bucket of one packet repairs a burst of n in n
// refills, after the receiver gave up and froze. Half a second of the
// spare rate lets a burst's repairs out at once and queues at most that
// much beside the media (50 ms of the link at a tenth spare).
const bucketDepth = 500 * time.Millisecond

// SetRate refills the bucket up to now and sets its rate from then on.
func (b *Bucket) SetRate(now time.Duration, bps float64) {
	b.refill(now)
	b.rate = bps
}

// Take takes bytes if the bucket holds them.
func (b *Bucket) Take(now time.Duration, bytes int) bool {
	b.refill(now)
	if b.tokens < float64(bytes) {
		return false
	}
	b.tokens -= float64(bytes)
	return true
}

// Fits says whether the bucket holds bytes now.
func (b *Bucket) Fits(now time.Duration, bytes int) bool {
	b.refill(now)
	return b.tokens >= float64(bytes)
}

// refill adds what the rate gave since the last refill (callers' clocks
// read before a lock may come a little out of order: never twice).
func (b *Bucket) refill(now time.Duration) {
	if now > b.last {
		b.tokens += b.rate / 8 * (now - b.last).Seconds()
		b.last = now
	}
	b.tokens = min(b.tokens, max(b.rate/8*bucketDepth.Seconds(), 1500))
}
