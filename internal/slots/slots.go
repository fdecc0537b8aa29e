// Package slots hands out indexes into fixed-size BPF arrays (per-route
// counters, per-interface slots), reusing freed ones first.
package slots

// Pool hands out 0..max-1. It is not safe for concurrent use.
type Pool struct {
	free []uint32
	next uint32
	max  uint32
}

// New is a pool of max indexes.
func New(max uint32) Pool { return Pool{max: max} }

// Get takes a free index; false when all are in use.
func (p *Pool) Get() (uint32, bool) {
	if n := len(p.free); n > 0 {
		s := p.free[n-1]
		p.free = p.free[:n-1]
		return s, true
	}
	if p.next >= p.max {
		return 0, false
	}
	p.next++
	return p.next - 1, true
}

// Put returns an index taken with Get.
func (p *Pool) Put(s uint32) { p.free = append(p.free, s) }

// Reserve marks indexes handed out before (by a previous process whose
// maps were kept) as taken; the others below the highest are free.
func (p *Pool) Reserve(used []uint32) {
	if len(used) == 0 {
		return
	}
	taken := map[uint32]bool{}
	for _, s := range used {
		taken[s] = true
		p.next = max(p.next, s+1)
	}
	p.free = p.free[:0]
	for s := uint32(0); s < p.next; s++ {
		if !taken[s] {
			p.free = append(p.free, s)
		}
	}
}
