/* Sequence rewriting for a receiver whose layers are dropped: the rules
 * and their reasons are internal/sfu/rewrite's (the Go reference, which
 * TestRewriteAgreesWithBPF holds this to), and struct rewrite_state is its
 * State. Pure computation on the state, so that it runs under the
 * replica's spin lock. */
#ifndef EBRTC_REWRITE_H
#define EBRTC_REWRITE_H

#include "common.h"

#define REWRITE_HISTORY 512 /* sequence numbers remembered */
#define REWRITE_WORDS (REWRITE_HISTORY / 64)
#define REWRITE_FRAMES 32   /* frames' decisions remembered */

#define LAST_START 0x01
#define LAST_END 0x02
#define LAST_PADDING 0x04

struct rewrite_state {
	__u32 top;    /* extended highest sequence number processed */
	__u32 offset; /* sequence numbers up to top that took no number */
	__u16 last_frame;
	__u8 last_flags;
	__u8 started;
	__u64 dropped[REWRITE_WORDS];    /* per seq mod REWRITE_HISTORY: took no number */
	__u32 frames[REWRITE_FRAMES];    /* per frame mod REWRITE_FRAMES: frame << 16 | forward << 1 | 1 */
};

/* A packet as the rewriter sees it. */
struct rewrite_packet {
	__u16 seq;
	__u16 frame;
	__u8 flags; /* LAST_START, LAST_END, LAST_PADDING */
	__u8 pad;
};

enum rewrite_verdict {
	REWRITE_DROP,
	REWRITE_SEND,
	REWRITE_PADDING, /* send emptied to padding: it fills the gap kept for it */
};

/* Bits [0, x) of a word, x in [0, 64]. */
INLINE __u64 bits_below(__s32 x)
{
	if (x <= 0)
		return 0;
	return x >= 64 ? ~0ULL : (1ULL << x) - 1;
}

/* Word w's bits of the sequence numbers [lo, hi) (mod REWRITE_HISTORY,
 * lo <= hi <= REWRITE_HISTORY). */
INLINE __u64 word_bits(__u32 lo, __u32 hi, int w)
{
	return bits_below((__s32)hi - 64 * w) & ~bits_below((__s32)lo - 64 * w);
}

/* Word w's bits of count sequence numbers from seq (count <
 * REWRITE_HISTORY): a range that may wrap. Straight-line code per word,
 * so the verifier walks no data-dependent loop. */
INLINE __u64 range_bits(__u32 seq, __u32 count, int w)
{
	__u32 at = seq % REWRITE_HISTORY, end = at + count;

	if (end <= REWRITE_HISTORY)
		return word_bits(at, end, w);
	return word_bits(at, REWRITE_HISTORY, w) | word_bits(0, end - REWRITE_HISTORY, w);
}

/* Sets (or clears) the dropped bits of count sequence numbers from seq. */
INLINE void rw_mark(struct rewrite_state *s, __u32 seq, __u32 count, int dropped)
{
#pragma clang loop unroll(disable)
	for (int w = 0; w < REWRITE_WORDS; w++) {
		__u64 m = count >= REWRITE_HISTORY ? ~0ULL : range_bits(seq, count, w);

		if (dropped)
			s->dropped[w] |= m;
		else
			s->dropped[w] &= ~m;
	}
}

INLINE int rw_dropped(const struct rewrite_state *s, __u32 seq)
{
	__u32 at = seq % REWRITE_HISTORY;

	return (s->dropped[(at / 64) % REWRITE_WORDS] >> (at % 64)) & 1;
}

/* How many sequence numbers in (seq, top] took no number (top - seq <
 * REWRITE_HISTORY). */
INLINE __u32 rw_dropped_above(const struct rewrite_state *s, __u32 seq)
{
	__u32 n = 0;

#pragma clang loop unroll(disable)
	for (int w = 0; w < REWRITE_WORDS; w++)
		n += __builtin_popcountll(s->dropped[w] & range_bits(seq + 1, s->top - seq, w));
	return n;
}

/* A recent frame's decision: 1 forwarded, 0 not, -1 unknown. */
INLINE int rw_frame(const struct rewrite_state *s, __u16 frame)
{
	__u32 e = s->frames[frame % REWRITE_FRAMES];

	if (!(e & 1) || (__u16)(e >> 16) != frame)
		return -1;
	return (e >> 1) & 1;
}

/* Whether every packet between the top and p (later, not consecutive) is
 * one the receiver does not get. */
INLINE int rw_only_dropped_between(const struct rewrite_state *s, const struct rewrite_packet *p)
{
	__u16 a = s->last_frame;

	if ((s->last_flags & LAST_PADDING) || (p->flags & LAST_PADDING))
		return 0;
	if (a == p->frame)
		return rw_frame(s, a) == 0;
	if (p->frame != (__u16)(a + 1))
		return 0;
	if (!(s->last_flags & LAST_END) && rw_frame(s, a) != 0)
		return 0;
	if (!(p->flags & LAST_START) && rw_frame(s, p->frame) != 0)
		return 0;
	return 1;
}

INLINE enum rewrite_verdict rw_settle(struct rewrite_state *s, __u32 seq, int forward, __u16 *number)
{
	rw_mark(s, seq, 1, !forward);
	if (!forward) {
		s->offset++;
		return REWRITE_DROP;
	}
	*number = seq - s->offset;
	return REWRITE_SEND;
}

/* forward: the receiver gets the packet's layer. */
/* Whether seq is at or below the top: reordered, or a retransmission. */
INLINE int rw_late(const struct rewrite_state *s, __u16 seq)
{
	return s->started && (__s16)(seq - (__u16)s->top) <= 0;
}

INLINE enum rewrite_verdict rw_rewrite(struct rewrite_state *s, const struct rewrite_packet *p, int forward,
				       __u16 *number)
{
	__u32 seq, missing;
	int absorbed;

	forward = forward && !(p->flags & LAST_PADDING);
	if (!(p->flags & LAST_PADDING) && !rw_late(s, p->seq)) /* a late packet's frame is older than the log may hold */
		s->frames[p->frame % REWRITE_FRAMES] = (__u32)p->frame << 16 | (forward ? 2 : 0) | 1;
	if (!s->started) {
		seq = (__u32)p->seq + (1U << 16);
		s->top = seq;
		s->offset = 0;
		s->started = 1;
		rw_mark(s, 0, REWRITE_HISTORY, 0);
	} else {
		seq = s->top + (__s32)(__s16)(p->seq - (__u16)s->top);
		if ((__s32)(seq - s->top) <= 0) {
			if (s->top - seq >= REWRITE_HISTORY || rw_dropped(s, seq))
				return REWRITE_DROP;
			*number = seq - s->offset + rw_dropped_above(s, seq);
			return forward ? REWRITE_SEND : REWRITE_PADDING;
		}
		missing = seq - s->top - 1;
		absorbed = missing > 0 && rw_only_dropped_between(s, p);
		if (absorbed)
			s->offset += missing;
		rw_mark(s, s->top + 1, missing, absorbed);
		s->top = seq;
	}
	s->last_frame = p->frame;
	s->last_flags = p->flags;
	return rw_settle(s, seq, forward, number);
}

#endif
