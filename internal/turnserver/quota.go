package turnserver

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/ratelimit"
)

// allocationCounter counts allocations per user (and source) and in
// total, for quotas and metrics, and channels for metrics; it also limits
// how fast one source may allocate.
type allocationCounter struct {
	quotas
	perIP  *ipRateLimiter // nil: no limit
	events *metrics.Events

	mu       sync.Mutex
	perUser  map[string]int // by quotaKey
	total    int
	pending  []reservation // granted by the quota, not yet created
	channels int
}

// quotas are the allocation limits (0: none): per user, counted per
// source address (an IPv6 /64 is one) if perSource, and in total.
type quotas struct {
	user      int
	perSource bool
	total     int
}

// quotaKey is what the user quota counts: the user, or with perSource the
// user at one source address. An app that gives all its clients one
// credential (common) is then not refused at its tenth concurrent call,
// and one address still cannot take the whole relay on one credential.
func (q quotas) quotaKey(user string, src net.Addr) string {
	if !q.perSource {
		return user
	}
	return user + "\x00" + sourceKey(addrPort(src).Addr().Unmap()).String()
}

// reservation is a slot the quota granted to an Allocate that pion has not
// created yet: counted, so concurrent requests cannot overshoot the quota,
// and forgotten after reservationTimeout if the allocation never comes (no
// free port, say).
type reservation struct {
	key string // quotaKey
	at  time.Time
}

const reservationTimeout = 5 * time.Second

func newAllocationCounter(q quotas, perIP *ipRateLimiter, events *metrics.Events) *allocationCounter {
	return &allocationCounter{quotas: q, perIP: perIP, events: events, perUser: map[string]int{}}
}

// quotaHandler refuses an allocation (486 Allocation Quota Reached) when the
// source allocates too fast, or the server or the user is at its quota. pion
// passes the user id the auth handler returned (for a TURN REST username,
// its userid part), which is what the quota counts.
func (c *allocationCounter) quotaHandler() func(userID, realm string, src net.Addr) bool {
	return func(userID, realm string, src net.Addr) bool {
		reason := c.refusal(userID, src)
		if reason != "" {
			c.events.AllocationRefusal.WithLabelValues(reason).Inc()
		}
		return reason == ""
	}
}

func (c *allocationCounter) refusal(user string, src net.Addr) string {
	// The source's rate first: a flood from one address is told apart from
	// a user at its quota, and pays for every attempt.
	if c.perIP != nil && !c.perIP.allow(addrPort(src).Addr()) {
		return "ip_rate"
	}
	key := c.quotaKey(user, src)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.expireReservations()
	pendingUser := 0
	for _, r := range c.pending {
		if r.key == key {
			pendingUser++
		}
	}
	switch {
	case c.quotas.total > 0 && c.total+len(c.pending) >= c.quotas.total:
		return "total_quota"
	case c.user > 0 && c.perUser[key]+pendingUser >= c.user:
		return "user_quota"
	}
	c.pending = append(c.pending, reservation{key: key, at: time.Now()})
	return ""
}

func (c *allocationCounter) expireReservations() {
	i := 0
	for i < len(c.pending) && time.Since(c.pending[i].at) > reservationTimeout {
		i++
	}
	c.pending = c.pending[i:]
}

func (c *allocationCounter) created(user string, src net.Addr) {
	key := c.quotaKey(user, src)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.pending {
		if r.key == key {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			break
		}
	}
	c.perUser[key]++
	c.total++
}

func (c *allocationCounter) deleted(user string, src net.Addr) {
	key := c.quotaKey(user, src)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.perUser[key]--; c.perUser[key] <= 0 {
		delete(c.perUser, key)
	}
	c.total--
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

// ipRateLimiter is a token bucket per source (an IPv4 address, an IPv6
// /64). Buckets idle long enough to be full again are forgotten, so the
// table stays as small as the set of recently active sources.
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

// sourceKey is what one source is: an IPv4 address, or an IPv6 /64 (one
// host or one customer's network, which rotates addresses at will).
func sourceKey(ip netip.Addr) netip.Addr {
	if ip.Is4() {
		return ip
	}
	p, _ := ip.Prefix(64)
	return p.Addr()
}

func (l *ipRateLimiter) allow(ip netip.Addr) bool {
	ip = sourceKey(ip.Unmap())
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
