/* Token buckets for per-allocation bandwidth limits, shared by all CPUs.
 *
 * Tokens are nanobytes (bytes x 1e9), so refilling is elapsed_ns x rate in
 * bytes per second with integers only. The arithmetic is the same as
 * internal/ratelimit's, which limits the user-space relay: both paths
 * enforce the same limit.
 */
#ifndef EBRTC_RATELIMIT_H
#define EBRTC_RATELIMIT_H

#include "common.h"

struct rate_bucket {
	struct bpf_spin_lock lock;
	__u32 pad;
	__u64 tokens; /* nanobytes */
	__u64 last;   /* CLOCK_MONOTONIC_COARSE, ns; 0: never used, the bucket is full */
};

#define NANO 1000000000ULL

/* Take len bytes from the bucket; 0 if there are not enough tokens (the
 * packet is dropped and nothing is taken). burst is in nanobytes. */
INLINE int bucket_take(struct rate_bucket *b, __u64 rate, __u64 burst, __u32 len, __u64 now)
{
	__u64 cost = (__u64)len * NANO;
	__u64 elapsed, tokens;
	int ok;

	bpf_spin_lock(&b->lock);
	if (!b->last) {
		tokens = burst;
	} else {
		elapsed = now > b->last ? now - b->last : 0;
		/* Capped before multiplying: a full bucket needs burst / rate ns at most. */
		if (elapsed > burst / rate)
			elapsed = burst / rate + 1;
		tokens = b->tokens + elapsed * rate;
		if (tokens > burst)
			tokens = burst;
	}
	ok = tokens >= cost;
	b->tokens = ok ? tokens - cost : tokens;
	b->last = now;
	bpf_spin_unlock(&b->lock);
	return ok;
}

#endif
