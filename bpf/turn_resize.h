// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* The frame resized around the data (bpf/turn_offload.c): the header
 * room in front, the padding behind; for an skb also the family change,
 * the headers saved across it, and the data moved where a partial
 * checksum pins it. */
#ifndef EBRTC_TURN_RESIZE_H
#define EBRTC_TURN_RESIZE_H

#include "common.h"
#include "hook.h"
#include "turn_packet.h"
#include "turn_path.h"
#ifdef EBRTC_TC
#include "skb.h"
#endif

/* Bytes in front of the data in the outgoing frame. */
INLINE __u32 out_header_len(const struct emit *e)
{
	return ETH_HLEN + ip_header_len(e->route->dst.family) + sizeof(struct udphdr) +
	       (e->channel ? CHANNEL_HDR_LEN : 0);
}

/* Length of the outgoing IP datagram, padding included (for the MTU check). */
INLINE __u32 out_ip_len(const struct emit *e)
{
	__u32 pad = e->channel ? (-(__u32)e->data_len & 3) : 0;

	return out_header_len(e) - ETH_HLEN + e->data_len + pad;
}

#ifndef EBRTC_TC
/* Resize the frame around the data: head to the new header length, tail to
 * data + padding. Returns the padding actually added, or -1 with the frame
 * restored, or -2 when it could not be restored. */
INLINE int resize(hook_ctx *ctx, const struct emit *e, __u32 hdr_len, __u32 pad)
{
	int delta = (int)e->data_off - (int)hdr_len;
	int len;

	if (bpf_xdp_adjust_head(ctx, delta))
		return -1;
	len = (int)((void *)(long)ctx->data_end - (void *)(long)ctx->data);
	/* A scalar from here on: folded into the sums below, the pointers would
	 * meet 32-bit arithmetic, which the verifier refuses. */
	asm volatile("" : "+r"(len));
	/* Often the tail is right already (no padding change): skip the call. */
	if ((int)(hdr_len + e->data_len + pad) == len ||
	    bpf_xdp_adjust_tail(ctx, (int)(hdr_len + e->data_len + pad) - len) == 0)
		return pad;
	/* Padding is optional over UDP (RFC 8656 section 12.5); try without. */
	if (pad && bpf_xdp_adjust_tail(ctx, (int)(hdr_len + e->data_len) - len) == 0)
		return 0;
	return bpf_xdp_adjust_head(ctx, -delta) ? -2 : -1;
}
#else
INLINE int change_family(hook_ctx *ctx, int family)
{
	return bpf_skb_change_proto(ctx, bpf_htons(family == AF_INET ? ETH_P_IP : ETH_P_IPV6), 0);
}

/* Shrinking an skb's headers drops bytes that growing it back does not
 * return, so the TC resizes keep the incoming headers (up to the data) to
 * restore on failure. */
#define SAVED_HEADERS 72

struct saved_headers {
	__u8 bytes[SAVED_HEADERS];
	__u32 len;
};

INLINE int save_headers(hook_ctx *ctx, struct saved_headers *h, __u32 len)
{
	if (len == 0 || len > SAVED_HEADERS)
		return -1;
	h->len = len;
	return bpf_skb_load_bytes(ctx, 0, h->bytes, len);
}

/* Undo a family change and a room change (either may be 0), then put the
 * saved headers back: -1 when the skb is as it arrived, -2 when it is not. */
INLINE int restore_headers(hook_ctx *ctx, const struct saved_headers *h, int in_family, int changed_family,
			   int room)
{
	__u32 len = h->len;

	if (room && bpf_skb_adjust_room(ctx, -room, BPF_ADJ_ROOM_MAC, 0))
		return -2;
	if (changed_family && change_family(ctx, in_family))
		return -2;
	if (len == 0 || len > SAVED_HEADERS || bpf_skb_store_bytes(ctx, 0, h->bytes, len, 0))
		return -2;
	return -1;
}

/* The skb counterpart of the XDP resize: the IP header changes size with
 * the family (bpf_skb_change_proto), the rest of the header room right after
 * the Ethernet header, the tail to data + padding. The data never moves.
 * Same returns as the XDP resize. */
INLINE int resize(hook_ctx *ctx, const struct emit *e, __u32 hdr_len, __u32 pad)
{
	int out_family = e->route->dst.family, changed = out_family != e->in_family;
	int room = (int)hdr_len - (int)e->data_off -
		   ((int)ip_header_len(out_family) - (int)ip_header_len(e->in_family));
	struct saved_headers saved;

	if (save_headers(ctx, &saved, e->data_off))
		return -1;
	if (changed && change_family(ctx, out_family))
		return -1;
	if (room && bpf_skb_adjust_room(ctx, room, BPF_ADJ_ROOM_MAC, 0))
		return restore_headers(ctx, &saved, e->in_family, changed, 0);
	if (bpf_skb_change_tail(ctx, hdr_len + e->data_len + pad, 0) == 0)
		return pad;
	if (pad && bpf_skb_change_tail(ctx, hdr_len + e->data_len, 0) == 0)
		return 0;
	return restore_headers(ctx, &saved, e->in_family, changed, room);
}

/* CHECKSUM_PARTIAL skbs (a local or virtual sender left the UDP checksum to
 * the device) point the device at the UDP header by its place in memory
 * (csum_start), which no helper can move. So here the UDP header stays put:
 * only the IP header changes size (change_proto, before it), and the data
 * moves by the ChannelData header, copied in constant-size pieces. */
#define MOVE_CHUNK 64
#define MOVE_MAX_CHUNKS 24
#define MOVE_MAX (MOVE_CHUNK * MOVE_MAX_CHUNKS + MOVE_CHUNK - 1)

INLINE int move_piece(hook_ctx *ctx, __u32 from, __u32 to, __u32 n)
{
	__u8 buf[MOVE_CHUNK];

	switch (n) {
#define MOVE_CASE(k)                                                   \
	case k:                                                        \
		if (bpf_skb_load_bytes(ctx, from, buf, k))             \
			return -1;                                     \
		return bpf_skb_store_bytes(ctx, to, buf, k, 0);
	MOVE_CASE(64)
	MOVE_CASE(32)
	MOVE_CASE(16)
	MOVE_CASE(8)
	MOVE_CASE(4)
	MOVE_CASE(2)
	MOVE_CASE(1)
#undef MOVE_CASE
	}
	return -1;
}

/* Move len bytes at off by shift (-4 or +4): towards the front in ascending
 * pieces, towards the end in descending ones, so no piece overwrites bytes
 * still to be read. */
INLINE int move_data(hook_ctx *ctx, __u32 off, __u32 len, int shift)
{
	__u32 done = 0, rem = len % MOVE_CHUNK, end = len;
	int i;

	if (len > MOVE_MAX)
		return -1;
	if (shift < 0) {
		for (i = 0; i < MOVE_MAX_CHUNKS && done + MOVE_CHUNK <= len; i++, done += MOVE_CHUNK)
			if (move_piece(ctx, off + done, off + done + shift, MOVE_CHUNK))
				return -1;
#pragma unroll
		for (__u32 n = 32; n; n >>= 1)
			if (len - done >= n) {
				if (move_piece(ctx, off + done, off + done + shift, n))
					return -1;
				done += n;
			}
		return 0;
	}
#pragma unroll
	for (__u32 n = 1; n <= 32; n <<= 1)
		if (rem & n) {
			end -= n;
			if (move_piece(ctx, off + end, off + end + shift, n))
				return -1;
		}
	for (i = 0; i < MOVE_MAX_CHUNKS && end >= MOVE_CHUNK; i++) {
		end -= MOVE_CHUNK;
		if (move_piece(ctx, off + end, off + end + shift, MOVE_CHUNK))
			return -1;
	}
	return 0;
}

/* resize for CHECKSUM_PARTIAL skbs. Once data has moved the skb cannot be
 * put back: failures after that are -2. */
INLINE int resize_in_place(hook_ctx *ctx, const struct emit *e, __u32 hdr_len, __u32 pad)
{
	int out_family = e->route->dst.family;
	int family_delta = (int)ip_header_len(out_family) - (int)ip_header_len(e->in_family);
	int shift = (int)hdr_len - (int)e->data_off - family_delta;
	__u32 data_off = e->data_off + family_delta;
	__u32 len = hdr_len + e->data_len + pad;

	struct saved_headers saved;
	int changed = out_family != e->in_family;

	if (e->data_len > MOVE_MAX || save_headers(ctx, &saved, e->data_off))
		return -1;
	if (changed && change_family(ctx, out_family))
		return -1;
	if (shift > 0) {
		if (bpf_skb_change_tail(ctx, len, 0))
			return restore_headers(ctx, &saved, e->in_family, changed, 0);
		return move_data(ctx, data_off, e->data_len, shift) ? -2 : pad;
	}
	if (shift < 0 && move_data(ctx, data_off, e->data_len, shift))
		return -2;
	return bpf_skb_change_tail(ctx, len, 0) ? -2 : pad;
}

/* How the skb carries its UDP checksum: OUT_CONTINUE with *state set, or a
 * slow-path outcome when a partial checksum covers something other than
 * this UDP header (tunnels, say). */
INLINE int csum_state(hook_ctx *ctx, const struct packet *pkt, __u8 *state)
{
	*state = skb_ip_summed(ctx);
	if (*state == CHECKSUM_PARTIAL && !skb_partial_is_udp(ctx, pkt->payload_off - sizeof(struct udphdr)))
		return OUT_SLOW_CHECKSUM_OFFLOAD;
	return OUT_CONTINUE;
}
#endif

#endif
