/* Transport-wide congestion control (draft-holmer-rmcat-transport-wide-cc-
 * extensions-01) per receiver leg: every packet a leg is sent carries
 * the leg's own transport-wide sequence number, so the receiver's
 * feedback describes exactly what crossed its link, and the SFU's
 * estimator (user space) knows when and how big each was from the leg's
 * log. The sender's packets carry the extension already (its sequence
 * numbers are its own link's); each replica's two bytes are rewritten.
 * User space sends packets of its own on a leg (retransmissions, probes)
 * and takes sequence numbers from the same counter and log, through a
 * shared mapping of the array (internal/sfu/dataplane/twcc.go). The same
 * logs record when each sender's numbers arrived: the SFU is the sender's
 * peer, and sends it the feedback. */
#ifndef EBRTC_TWCC_H
#define EBRTC_TWCC_H

#include "common.h"

#define TWCC_LEGS 4096 /* legs with transport-wide numbers at once */
#define TWCC_LOG 512   /* sequence numbers a leg remembers: feedback comes every ~100 ms */
#define TWCC_LEN 2     /* the extension's data: the sequence number */

/* One leg. log[seq % TWCC_LOG] = send time (CLOCK_MONOTONIC us, 32 bits)
 * << 32 | size (RTP bytes) << 16 | seq: one 8-byte store, read whole. */
struct leg_twcc {
	__u32 next; /* the next sequence number (low 16 bits on the wire) */
	__u32 pad;
	__u64 log[TWCC_LOG];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, TWCC_LEGS);
	__type(key, __u32);
	__type(value, struct leg_twcc);
} twcc_legs SEC(".maps");

INLINE __u64 twcc_log_entry(__u64 now_ns, __u32 size, __u16 seq)
{
	return (now_ns / 1000) << 32 | (__u64)(size & 0xffff) << 16 | seq;
}

/* The leg's next sequence number (leg: its index + 1; 0 or none: the leg
 * has no transport-wide numbers), logged as sent now with size bytes. */
INLINE int twcc_next(__u32 leg, __u32 size, __u16 *seq)
{
	__u32 i = leg - 1;
	struct leg_twcc *l;

	if (!leg)
		return -1;
	l = bpf_map_lookup_elem(&twcc_legs, &i);
	if (!l)
		return -1;
	*seq = (__u16)__sync_fetch_and_add(&l->next, 1);
	l->log[*seq % TWCC_LOG] = twcc_log_entry(bpf_ktime_get_ns(), size, *seq);
	return 0;
}

/* A sender's transport-wide number seq arrived now with size bytes: user
 * space sends the sender transport-cc feedback from its log (log: its
 * index + 1 in the same array, whose counter it does not use). */
INLINE void twcc_arrived(__u32 log, __u32 size, __u16 seq)
{
	__u32 i = log - 1;
	struct leg_twcc *l;

	if (!log)
		return;
	l = bpf_map_lookup_elem(&twcc_legs, &i);
	if (l)
		l->log[seq % TWCC_LOG] = twcc_log_entry(bpf_ktime_get_ns(), size, seq);
}

/* The checksum change for a 16-bit field at an odd offset from the
 * checksummed area's start: the field's bytes straddle two words, so the
 * difference applies byte-swapped (RFC 1071, byte order independence). */
INLINE __be16 twcc_csum_word(__be16 v, int odd)
{
	return odd ? (__be16)((v >> 8) | (v << 8)) : v;
}

#endif
