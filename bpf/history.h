/* The SFU's retransmission history: each video sender's recent packets,
 * written here as they are forwarded, read by user space when a receiver
 * NACKs one (it answers the receiver itself, on RTX where negotiated).
 * The same entries tell a retransmission or a network duplicate of a
 * packet already forwarded, which nobody gets twice. Go reads them
 * (internal/sfu/dataplane/history.go). */
#ifndef EBRTC_HISTORY_H
#define EBRTC_HISTORY_H

#include "common.h"
#include "hook.h"

#define HISTORY_SLOTS 512  /* packets per sender: at least a second up to 512 packets/s */
#define HISTORY_DATA 1472  /* the largest RTP packet kept (an IPv4 datagram at 1500 bytes) */
#define HISTORY_STREAMS 512 /* senders with a history at once (user space creates their entries) */
#define HISTORY_VALID 0x10000 /* in a tag: the entry holds sequence number (tag & 0xffff) */

struct history_key {
	__u32 stream; /* the sender's slot */
	__u32 index;  /* sequence number mod HISTORY_SLOTS */
};

/* One packet. head and tail hold its tag once it is whole; a writer
 * clears tail first and sets it last, so a reader that copies the entry
 * while it is rewritten finds them different (or zero). */
struct history_entry {
	__u32 head;
	__u32 ts; /* RTP timestamp: with the sequence number, which packet this is */
	__u64 at; /* arrival, CLOCK_MONOTONIC ns */
	__u16 len;
	__u16 pad[3];
	__u8 data[HISTORY_DATA];
	__u32 tail;
};

/* Entries are made by user space when a sender gets a history (and
 * removed with it): the program only looks them up, so no packet
 * allocates, and a sender without entries simply has no history. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, HISTORY_STREAMS * HISTORY_SLOTS);
	__type(key, struct history_key);
	__type(value, struct history_entry);
} history SEC(".maps");

INLINE __u32 history_tag(__u16 seq)
{
	return HISTORY_VALID | seq;
}

/* 1 when the sender's packet (seq, ts) is already in its history: a
 * retransmission of one the SFU has, or a duplicate; nobody gets it
 * again. Otherwise the packet (len bytes at off) is kept and 0 returned;
 * a packet too long to keep clears its entry (a NACK for it goes to the
 * sender). */
INLINE int history_seen_or_keep(hook_ctx *ctx, __u32 stream, __u16 seq, __u32 ts, __u32 off, __u32 len, __u64 now)
{
	struct history_key k = { .stream = stream, .index = seq % HISTORY_SLOTS };
	struct history_entry *e = bpf_map_lookup_elem(&history, &k);
	__u32 tag = history_tag(seq);

	if (!e)
		return 0;
	if (e->head == tag && e->tail == tag && e->ts == ts)
		return 1;
	__sync_lock_test_and_set(&e->tail, 0); /* a full barrier: readers see the entry broken first */
	e->head = 0;
	if (len == 0 || len > HISTORY_DATA || hook_load_bytes(ctx, off, e->data, len))
		return 0;
	e->len = len;
	e->ts = ts;
	e->at = now;
	e->head = tag;
	__sync_lock_test_and_set(&e->tail, tag); /* and whole last */
	return 0;
}

#endif
