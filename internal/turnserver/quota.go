package turnserver

import (
	"net"
	"sync"
)

// allocationCounter counts allocations per user and in total, for quotas and
// metrics, and channels for metrics.
type allocationCounter struct {
	userQuota, totalQuota int

	mu       sync.Mutex
	perUser  map[string]int
	total    int
	channels int
}

func newAllocationCounter(userQuota, totalQuota int) *allocationCounter {
	return &allocationCounter{userQuota: userQuota, totalQuota: totalQuota, perUser: map[string]int{}}
}

// quotaHandler refuses an allocation (486 Allocation Quota Reached) when the
// user or the server is at its quota.
func (c *allocationCounter) quotaHandler(userID func(string) string) func(username, realm string, src net.Addr) bool {
	return func(username, realm string, src net.Addr) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.totalQuota > 0 && c.total >= c.totalQuota {
			return false
		}
		return c.userQuota == 0 || c.perUser[userID(username)] < c.userQuota
	}
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
