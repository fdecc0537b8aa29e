package offload

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/cilium/ebpf"
)

// allocation identifies a TURN allocation by its client 5-tuple: the
// channels of one allocation share its bandwidth buckets.
type allocation struct{ client, server netip.AddrPort }

func allocationOf(ch Channel) allocation { return allocation{ch.Client, ch.Server} }

// allocBuckets are an allocation's rate_buckets indexes, held while it has
// channels in the maps.
type allocBuckets struct {
	toPeer, toClient uint32
	channels         int
}

const noBucket = 0xffffffff // NO_BUCKET in bpf/turn.h

// acquireBuckets returns the allocation's bucket indexes, handing out and
// emptying fresh ones for its first channel (noBucket without a limit).
func (e *Engine) acquireBuckets(a allocation) (toPeer, toClient uint32, err error) {
	if !e.limit.Enabled() {
		return noBucket, noBucket, nil
	}
	if b, ok := e.buckets[a]; ok {
		b.channels++
		return b.toPeer, b.toClient, nil
	}
	p, ok1 := e.bucketSlots.Get()
	c, ok2 := e.bucketSlots.Get()
	if !ok1 || !ok2 {
		if ok1 {
			e.bucketSlots.Put(p)
		}
		return 0, 0, errors.New("offload: rate bucket table full")
	}
	for _, idx := range []uint32{p, c} {
		// last == 0: the new allocation starts with a full bucket. Under the
		// bucket's lock: a packet of the slot's previous allocation may be
		// charging it right now.
		if err := e.objs.RateBuckets.Update(idx, turnRateBucket{}, ebpf.UpdateLock); err != nil {
			e.bucketSlots.Put(p)
			e.bucketSlots.Put(c)
			return 0, 0, fmt.Errorf("offload: reset rate bucket: %w", err)
		}
	}
	e.buckets[a] = &allocBuckets{toPeer: p, toClient: c, channels: 1}
	return p, c, nil
}

// releaseBuckets drops a channel's hold on its allocation's buckets (held:
// whether it had one; a channel restored from a run without a limit has not).
func (e *Engine) releaseBuckets(a allocation, held bool) {
	b, ok := e.buckets[a]
	if !ok || !held {
		return
	}
	if b.channels--; b.channels <= 0 {
		e.bucketSlots.Put(b.toPeer)
		e.bucketSlots.Put(b.toClient)
		delete(e.buckets, a)
	}
}

// restoreBuckets takes over the buckets of a channel found in pinned maps.
func (e *Engine) restoreBuckets(a allocation, toPeer, toClient uint32) []uint32 {
	if toPeer == noBucket || toClient == noBucket {
		return nil
	}
	if b, ok := e.buckets[a]; ok {
		b.channels++
		return nil
	}
	e.buckets[a] = &allocBuckets{toPeer: toPeer, toClient: toClient, channels: 1}
	return []uint32{toPeer, toClient}
}
