package turnserver

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/ratelimit"
)

// allocationCounter counts allocations per user and in total, for quotas and
// metrics, and channels for metrics; it also limits how fast one source IP
// may allocate.
type allocationCounter struct {
	userQuota, totalQuota int
	perIP                 *ipRateLimiter // nil: no limit
	events                *metrics.Events

	mu       sync.Mutex
	perUser  map[string]int
	total    int
	channels int
}

func newAllocationCounter(userQuota, totalQuota int, perIP *ipRateLimiter, events *metrics.Events) *allocationCounter {
	return &allocationCounter{userQuota: userQuota, totalQuota: totalQuota, perIP: perIP, events: events, perUser: map[string]int{}}
}

// quotaHandler refuses an allocation (486 Allocation Quota Reached) when the
// server or the user is at its quota, or the source IP allocates too fast.
func (c *allocationCounter) quotaHandler(userID func(string) string) func(username, realm string, src net.Addr) bool {
	return func(username, realm string, src net.Addr) bool {
		reason := c.refusal(userID(username), src)
		if reason != "" {
			c.events.AllocationRefusal.WithLabelValues(reason).Inc()
		}
		return reason == ""
	}
}

func (c *allocationCounter) refusal(user string, src net.Addr) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	// The source's rate first: a flood from one address is told apart from
	// a user at its quota, and pays for every attempt.
	switch {
	case c.perIP != nil && !c.perIP.allow(addrPort(src).Addr()):
		return "ip_rate"
	case c.totalQuota > 0 && c.total >= c.totalQuota:
		return "total_quota"
	case c.userQuota > 0 && c.perUser[user] >= c.userQuota:
		return "user_quota"
	}
	return ""
}

func (c *allocationCounter) created(user string) {
	c.mu.Lock()
	c.perUser[user]++
	c.total++
	c.mu.Unlock()
}

func (c *allocationCounter) deleted(user string) {
	c.mu.Lock()
	if c.perUser[user]--; c.perUser[user] <= 0 {
		delete(c.perUser, user)
	}
	c.total--
	c.mu.Unlock()
}

func (c *allocationCounter) channel(delta int) {
	c.mu.Lock()
	c.channels += delta
	c.mu.Unlock()
}

func (c *allocationCounter) counts() (allocations, channels int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total, c.channels
}

// ipRateLimiter is a token bucket per source IP. Buckets idle long enough to
// be full again are forgotten, so the table stays as small as the set of
// recently active sources.
type ipRateLimiter struct {
	limit ratelimit.Limit
	idle  time.Duration // a bucket idle this long is full

	mu        sync.Mutex
	buckets   map[netip.Addr]*ipBucket
	lastSweep time.Time
}

type ipBucket struct {
	ratelimit.Bucket
	lastUsed time.Time
}

func newIPRateLimiter(perSecond, burst int) *ipRateLimiter {
	if perSecond <= 0 {
		return nil
	}
	return &ipRateLimiter{
		limit:   ratelimit.PerSecond(uint64(perSecond), uint64(burst)),
		idle:    time.Duration(burst+1) * time.Second / time.Duration(perSecond),
		buckets: map[netip.Addr]*ipBucket{},
	}
}

func (l *ipRateLimiter) allow(ip netip.Addr) bool {
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > l.idle {
		for a, b := range l.buckets {
			if now.Sub(b.lastUsed) > l.idle {
				delete(l.buckets, a)
			}
		}
		l.lastSweep = now
	}
	b, ok := l.buckets[ip]
	if !ok {
		b = &ipBucket{}
		l.buckets[ip] = b
	}
	b.lastUsed = now
	return b.Take(l.limit, 1, ratelimit.Now())
}
