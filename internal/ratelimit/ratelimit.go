// Package ratelimit is the token bucket that caps an allocation's relayed
// bandwidth. The user-space relay uses Bucket; the fast path runs the same
// integer arithmetic in bpf/ratelimit.h with the Limit computed here, so
// both paths enforce one limit the same way.
package ratelimit

import (
	"fmt"
	"sync"
	"time"
)

// nano: tokens are nanobytes, so a refill is elapsed ns x bytes per second.
const nano = uint64(time.Second)

// BurstDuration is how much traffic at the full rate a bucket holds: enough
// for a video key frame sent at once, small enough that a sender cannot
// exceed the limit for long.
const BurstDuration = 200 * time.Millisecond

// minBurstBytes lets two full-size datagrams through even at tiny limits.
const minBurstBytes = 3000

// MaxBitrate is the largest limit whose arithmetic stays within 64 bits.
const MaxBitrate = 100_000_000_000

// Limit is a rate in bytes per second and a bucket depth in nanobytes.
type Limit struct {
	Rate  uint64
	Burst uint64
}

// FromBitrate is the limit for bps bits per second of relayed data; zero
// means no limit.
func FromBitrate(bps uint64) (Limit, error) {
	if bps == 0 {
		return Limit{}, nil
	}
	if bps < 8 || bps > MaxBitrate {
		return Limit{}, fmt.Errorf("%d bit/s is not within 8-%d", bps, uint64(MaxBitrate))
	}
	rate := bps / 8
	burst := max(rate*uint64(BurstDuration)/nano, minBurstBytes)
	return Limit{Rate: rate, Burst: burst * nano}, nil
}

// Enabled reports whether the limit limits anything.
func (l Limit) Enabled() bool { return l.Rate != 0 }

// Bucket is one allocation's bucket for one direction.
type Bucket struct {
	mu     sync.Mutex
	tokens uint64 // nanobytes
	last   uint64 // Now(); 0: never used, the bucket is full
}

// Take takes n bytes at time now (ns, from Now); false if the bucket has
// too few tokens, in which case the datagram is dropped and nothing taken.
func (b *Bucket) Take(l Limit, n int, now uint64) bool {
	if !l.Enabled() {
		return true
	}
	cost := uint64(n) * nano
	b.mu.Lock()
	defer b.mu.Unlock()
	tokens := l.Burst
	if b.last != 0 {
		elapsed := uint64(0)
		if now > b.last {
			elapsed = now - b.last
		}
		// Capped before multiplying: a full bucket needs Burst/Rate ns at most.
		elapsed = min(elapsed, l.Burst/l.Rate+1)
		tokens = min(b.tokens+elapsed*l.Rate, l.Burst)
	}
	ok := tokens >= cost
	if ok {
		tokens -= cost
	}
	b.tokens, b.last = tokens, now
	return ok
}

var epoch = time.Now()

// Now is a monotonic clock in ns for Take, never 0.
func Now() uint64 { return uint64(time.Since(epoch)) + 1 }

// PerSecond is a limit on events rather than bytes: n a second on average,
// burst at once (Take them one at a time).
func PerSecond(n, burst uint64) Limit {
	if n == 0 {
		return Limit{}
	}
	return Limit{Rate: n, Burst: max(burst, 1) * nano}
}
