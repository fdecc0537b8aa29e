/* The time the fast path stamps and expires things with. */
#ifndef EBRTC_CLOCK_H
#define EBRTC_CLOCK_H

#include "common.h"

/* CLOCK_MONOTONIC_COARSE moves only at a timer tick, when jiffies does, so
 * it is read once per tick and CPU and taken from this copy otherwise:
 * bpf_jiffies64 is a load, bpf_ktime_get_coarse_ns a seqcount loop and a
 * timespec conversion. Read in the instant between a tick's jiffies and
 * clock updates, the copy lags one tick until the next; it never goes
 * backwards. */
struct clock_cache {
	__u64 jiffies;
	__u64 ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct clock_cache);
} clock_cache SEC(".maps");

INLINE __u64 coarse_now(void)
{
	__u32 zero = 0;
	struct clock_cache *c = bpf_map_lookup_elem(&clock_cache, &zero);
	__u64 j = bpf_jiffies64(), ns;

	if (c && c->jiffies == j && c->ns)
		return c->ns;
	ns = bpf_ktime_get_coarse_ns();
	if (c) {
		c->jiffies = j;
		c->ns = ns;
	}
	return ns;
}

#endif
