// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* The outgoing headers written in place (bpf/turn_offload.c): Ethernet,
 * IP, UDP and the ChannelData header, the IPv4 identification, the UDP
 * checksum from the data's sum (by difference, or in full where the input
 * carried none), the padding zeroed. */
#ifndef EBRTC_TURN_EMIT_H
#define EBRTC_TURN_EMIT_H

#include "common.h"
#include "csum.h"
#include "hook.h"
#include "turn_packet.h"
#include "turn_path.h"

/* Full sum of the data, for inputs without a UDP checksum that must leave with
 * one (IPv4 -> IPv6). Every load has a constant size (64-byte chunks, then
 * words, then the last 0-3 bytes) so the verifier keeps its bounds; all
 * pieces start at even offsets, so byte parity holds. */
#define SUM_CHUNK 64
#define SUM_MAX_CHUNKS 24

INLINE int load_and_sum(hook_ctx *ctx, __u32 off, __u32 n, __u64 *sum)
{
	__u8 buf[4] = {};

	switch (n) {
	case 1:
		if (hook_load_bytes(ctx, off, buf, 1))
			return -1;
		break;
	case 2:
		if (hook_load_bytes(ctx, off, buf, 2))
			return -1;
		break;
	case 3:
		if (hook_load_bytes(ctx, off, buf, 3))
			return -1;
		break;
	case 4:
		if (hook_load_bytes(ctx, off, buf, 4))
			return -1;
		break;
	default:
		return 0;
	}
	*sum += *(__u32 *)buf;
	return 0;
}

INLINE int data_sum_slow(hook_ctx *ctx, __u32 off, __u32 len, __u64 *sum)
{
	__u8 buf[SUM_CHUNK];
	__u32 end = off + len;
	int i;

	if (len > SUM_CHUNK * SUM_MAX_CHUNKS)
		return -1;
	for (i = 0; i < SUM_MAX_CHUNKS && off + SUM_CHUNK <= end; i++) {
		if (hook_load_bytes(ctx, off, buf, SUM_CHUNK))
			return -1;
		*sum += (__u32)bpf_csum_diff(NULL, 0, (__be32 *)buf, SUM_CHUNK, 0);
		off += SUM_CHUNK;
	}
	for (i = 0; i < SUM_CHUNK / 4 && off + 4 <= end; i++) {
		if (load_and_sum(ctx, off, 4, sum))
			return -1;
		off += 4;
	}
	return off < end ? load_and_sum(ctx, off, end - off, sum) : 0;
}

/* IPv4 identification: 0 with DF set (an atomic datagram, RFC 6864), else
 * the route's next value, unique per relay address and peer for 2^16
 * datagrams as the kernel's per-destination counters are. */
INLINE __u16 ip_id(const struct emit *e)
{
	if (e->df)
		return 0;
	return (__u16)__sync_fetch_and_add(&((struct route *)e->route)->ip_id, 1);
}

/* Headers from the Ethernet destination to the ChannelData header; check is
 * the UDP checksum field. */
INLINE int write_headers(hook_ctx *ctx, const struct emit *e, const struct path *nh,
			 __u16 udp_len, __u16 check)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	const struct route *r = e->route;
	struct udphdr *udph;

	if (r->dst.family == AF_INET) {
		struct iphdr *iph = data + ETH_HLEN;

		udph = (void *)(iph + 1);
		if ((void *)(udph + 1) > data_end)
			return -1;
		eth_write(data, nh->dmac, nh->smac, ETH_P_IP);
		ipv4_write(iph, &r->src.ip, &r->dst.ip, udp_len, e->tos, e->df, e->ttl, ip_id(e));
	} else {
		struct ipv6hdr *ip6h = data + ETH_HLEN;

		udph = (void *)(ip6h + 1);
		if ((void *)(udph + 1) > data_end)
			return -1;
		eth_write(data, nh->dmac, nh->smac, ETH_P_IPV6);
		ipv6_write(ip6h, &r->src.ip, &r->dst.ip, udp_len, e->tos, e->ttl);
	}
	udp_write(udph, r->src.port, r->dst.port, udp_len);
	if (e->channel) {
		struct channel_hdr *ch = (void *)(udph + 1);

		if ((void *)(ch + 1) > data_end)
			return -1;
		ch->number = e->channel;
		ch->len = bpf_htons(e->data_len);
	}
	udph->check = check;
	return 0;
}

/* The grown tail may hold an old Ethernet trailer: zero the padding.
 * Constant lengths keep the verifier's bounds on the size argument. */
INLINE int zero_padding(hook_ctx *ctx, __u32 off, int n)
{
	__u32 zeros = 0;

	switch (n) {
	case 1:
		return hook_store_bytes(ctx, off, &zeros, 1);
	case 2:
		return hook_store_bytes(ctx, off, &zeros, 2);
	case 3:
		return hook_store_bytes(ctx, off, &zeros, 3);
	}
	return 0;
}

/* The UDP checksum field for the new datagram: complete from the data's sum,
 * or, for a partial checksum the device finishes, the pseudo-header alone. */
INLINE __u16 udp_check(const struct emit *e, __u16 udp_len)
{
	const struct route *r = e->route;
	__u64 pseudo = csum_pseudo(&r->src.ip, &r->dst.ip, r->dst.family, udp_len);
	__u64 sum = pseudo + r->src.port + r->dst.port + bpf_htons(udp_len);

	if (e->csum_partial)
		return csum_fold(pseudo);
	if (!e->data_sum_valid && r->dst.family == AF_INET)
		return 0; /* IPv4 without a checksum stays without */
	if (e->channel)
		sum += (__u64)e->channel + bpf_htons(e->data_len);
	return udp_csum_finish(sum + e->data_sum);
}

/* Build the outgoing datagram in place. Nothing is written before every
 * check that can fail has passed, so a slow-path verdict leaves the packet
 * exactly as it arrived. */
INLINE int rewrite(hook_ctx *ctx, struct emit *e, const struct path *nh)
{
	const struct route *r = e->route;
	__u32 hdr_len = out_header_len(e);
	__u32 pad = e->channel ? (-(__u32)e->data_len & 3) : 0;
	__u16 udp_len = sizeof(struct udphdr) + (e->channel ? CHANNEL_HDR_LEN : 0) + e->data_len;
	int added;

	if (!e->csum_partial && !e->data_sum_valid && r->dst.family == AF_INET6) {
		e->data_sum = 0;
		if (data_sum_slow(ctx, e->data_off, e->data_len, &e->data_sum))
			return OUT_SLOW_ZERO_UDP_CHECKSUM;
	}
#ifdef EBRTC_TC
	if (e->csum_partial)
		added = resize_in_place(ctx, e, hdr_len, pad);
	else
		added = resize(ctx, e, hdr_len, pad);
#else
	added = resize(ctx, e, hdr_len, pad);
#endif
	if (added == -1)
		return e->csum_partial ? OUT_SLOW_CHECKSUM_OFFLOAD : OUT_SLOW_NO_HEADROOM;
	if (added < 0)
		return OUT_DROP_REWRITE_FAILED;
	if (zero_padding(ctx, (hdr_len + e->data_len) & 0xffff, added))
		return OUT_DROP_REWRITE_FAILED;
	udp_len += added;
	if (write_headers(ctx, e, nh, udp_len, udp_check(e, udp_len)))
		return OUT_DROP_REWRITE_FAILED;
	return OUT_CONTINUE;
}

/* Sum of the ChannelData padding bytes (0-3 of them), which the data leaves behind. */
INLINE int padding_sum(hook_ctx *ctx, __u32 off, __u32 n, __u16 data_len, __u64 *sum)
{
	__u8 pad[4] = {};

	if (n == 0)
		return 0;
	if (n > 3 || hook_load_bytes(ctx, off & 0xffff, pad, n & 3))
		return -1;
#pragma unroll
	for (int i = 0; i < 3; i++)
		if (i < n)
			*sum += csum_byte(pad[i], (data_len + i) & 1);
	return 0;
}

#endif
