package ratecontrol

import "time"

// Bucket is a token bucket in bytes: what a link's retransmissions may
// take, refilled at a rate, holding at most 100 ms of it (and a packet).
type Bucket struct {
	rate   float64 // bits/s
	tokens float64 // bytes
	last   time.Duration
}

// bucketDepth is how much of the rate the bucket holds.
const bucketDepth = 100 * time.Millisecond

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

func (b *Bucket) refill(now time.Duration) {
	if now > b.last {
		b.tokens += b.rate / 8 * (now - b.last).Seconds()
	}
	b.last = now
	b.tokens = min(b.tokens, max(b.rate/8*bucketDepth.Seconds(), 1500))
}
