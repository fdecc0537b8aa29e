// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* XDP fast path for TURN ChannelData over UDP (RFC 8656).
 *
 * Client -> peer: ChannelData arriving at a TURN listening port on a bound
 * channel leaves as plain UDP from the relay address to the peer.
 * Peer -> client: UDP arriving at a relay address from a bound peer leaves as
 * ChannelData from the listening address to the client.
 * Hairpin: when the peer is another relay address of this server, both legs
 * are done here and the datagram leaves as ChannelData to the other client.
 *
 * Headers are rebuilt from scratch at fixed offsets (no payload move); the
 * payload stays where it is and the headers and tail are resized around it.
 * Anything the program is not sure about is passed to the kernel untouched.
 *
 * Compiled twice (hook.h): for XDP, and with EBRTC_TC for TC ingress, where
 * it serves interfaces whose neighbours take no XDP frames (a veth whose peer
 * runs no XDP) and skbs XDP never sees whole (partial checksums). Both
 * objects share one set of maps.
 */
#include "common.h"
#include "csum.h"
#include "eth.h"
#include "ip.h"
#include "udp.h"
#include "turn.h"
#include "stun.h"
#include "source.h"
#include "ratelimit.h"
#include "clock.h"
#include "outcome.h"
#include "hook.h"
#include "turn_maps.h"
#include <linux/if_packet.h>
#include <bpf/bpf_core_read.h>
#ifdef EBRTC_TC
#include "skb.h"
#endif

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* What parsing learned about the incoming datagram. */
struct packet {
	struct ip_info ip;
	struct udp_info udp;
	__u32 payload_off; /* UDP payload offset from ctx->data */
};

/* The datagram to emit: which bytes of the incoming packet are its data,
 * where it goes, and whether a ChannelData header goes in front. */
struct emit {
	const struct route *route;
	__u32 data_off;
	__u16 data_len;
	__be16 channel; /* 0: plain UDP to a peer */
	__u64 data_sum;
	__u8 data_sum_valid; /* 0 when the input had no UDP checksum */
	__u8 tos;
	__u8 df;
	__u8 ttl;       /* TTL or hop limit of the new IP header */
	__u8 in_family; /* of the incoming datagram */
	__u8 csum_partial; /* TC: the device finishes the UDP checksum (CHECKSUM_PARTIAL) */
};

/* The routes a fast packet follows: one, or two for a hairpin (the sending
 * client's channel, then the receiving client's). The last one is emitted. */
struct legs {
	struct route *route[2];
};

INLINE void count_outcome(__u32 outcome, __u32 bytes)
{
	struct outcome_stats *s = bpf_map_lookup_elem(&outcomes, &outcome);

	if (s) {
		s->packets++;
		s->bytes += bytes;
	}
}

INLINE void count_flow(struct flow_stats *s, __u32 bytes, __u64 now)
{
	if (s) {
		s->packets++;
		s->bytes += bytes;
		s->last_seen = now;
	}
}

/* Whether an interval has passed since the time stamp last. 0 means never:
 * the clock counts from boot, so now - 0 is the uptime, not an interval. */
INLINE int interval_passed(__u64 last, __u64 now, __u64 interval)
{
	return !last || now - last >= interval;
}

/* Whether this packet of the flow s goes to the server as a heartbeat
 * (counted per CPU: with several CPUs the share is per CPU, not global). */
INLINE int spill(const struct offload_config *cfg, struct flow_stats *s, __u64 now)
{
	if (!s || (!cfg->spill_every && !cfg->spill_interval_ns))
		return 0;
	if ((cfg->spill_every && ++s->since_spill >= cfg->spill_every) ||
	    (cfg->spill_interval_ns && interval_passed(s->last_spill, now, cfg->spill_interval_ns))) {
		s->since_spill = 0;
		s->last_spill = now;
		s->spilled++;
		return 1;
	}
	return 0;
}

/* Bytes in the frame: in an skb, also those not in its linear part. */
INLINE __u32 frame_len(hook_ctx *ctx)
{
#ifdef EBRTC_TC
	return ctx->len;
#else
	return (__u32)((void *)(long)ctx->data_end - (void *)(long)ctx->data);
#endif
}

INLINE int parse(hook_ctx *ctx, struct packet *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 avail = frame_len(ctx) - ETH_HLEN;
	__u16 proto;
	int out;

	out = eth_parse(data, data_end, &proto);
	if (out != OUT_CONTINUE)
		return out;
	if (proto == ETH_P_IP) {
		out = ipv4_parse(data + ETH_HLEN, data_end, avail, &pkt->ip);
		if (out != OUT_CONTINUE)
			return out;
		pkt->payload_off = ETH_HLEN + sizeof(struct iphdr) + sizeof(struct udphdr);
		return udp_parse(data + ETH_HLEN + sizeof(struct iphdr), data_end, &pkt->ip, &pkt->udp);
	}
	out = ipv6_parse(data + ETH_HLEN, data_end, avail, &pkt->ip);
	if (out != OUT_CONTINUE)
		return out;
	pkt->payload_off = ETH_HLEN + sizeof(struct ipv6hdr) + sizeof(struct udphdr);
	return udp_parse(data + ETH_HLEN + sizeof(struct ipv6hdr), data_end, &pkt->ip, &pkt->udp);
}

INLINE int is_listen_port(const struct offload_config *cfg, __be16 port)
{
#pragma unroll
	for (int i = 0; i < MAX_LISTEN_PORTS; i++)
		if (cfg->listen_ports[i] && cfg->listen_ports[i] == port)
			return 1;
	return 0;
}

INLINE int is_relay_port(const struct offload_config *cfg, __be16 port)
{
	__u16 p = bpf_ntohs(port);

	return p >= cfg->relay_port_min && p <= cfg->relay_port_max;
}

INLINE struct route *lookup_client_route(const struct packet *pkt, __be16 channel)
{
	if (pkt->ip.family == AF_INET) {
		struct client_key_v4 k = {
			.client_ip = pkt->ip.saddr.v4,
			.server_ip = pkt->ip.daddr.v4,
			.client_port = pkt->udp.sport,
			.server_port = pkt->udp.dport,
			.channel = channel,
		};
		return LOOKUP_AT(&client_routes_v4, &k, "client_routes_v4");
	}
	struct client_key_v6 k = {
		.client_port = pkt->udp.sport,
		.server_port = pkt->udp.dport,
		.channel = channel,
	};
	__builtin_memcpy(k.client_ip, pkt->ip.saddr.v6, 16);
	__builtin_memcpy(k.server_ip, pkt->ip.daddr.v6, 16);
	return LOOKUP_AT(&client_routes_v6, &k, "client_routes_v6");
}

INLINE struct route *lookup_peer_route(const struct endpoint *peer, const struct endpoint *relay)
{
	if (peer->family == AF_INET) {
		struct peer_key_v4 k = {
			.peer_ip = peer->ip.v4,
			.relay_ip = relay->ip.v4,
			.peer_port = peer->port,
			.relay_port = relay->port,
		};
		return LOOKUP_AT(&peer_routes_v4, &k, "peer_routes_v4");
	}
	struct peer_key_v6 k = {
		.peer_port = peer->port,
		.relay_port = relay->port,
	};
	__builtin_memcpy(k.peer_ip, peer->ip.v6, 16);
	__builtin_memcpy(k.relay_ip, relay->ip.v6, 16);
	return LOOKUP_AT(&peer_routes_v6, &k, "peer_routes_v6");
}

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

INLINE int fib_outcome(int rc)
{
	switch (rc) {
	case BPF_FIB_LKUP_RET_NO_NEIGH:
		return OUT_SLOW_FIB_NO_NEIGHBOUR;
	case BPF_FIB_LKUP_RET_FRAG_NEEDED:
		return OUT_SLOW_FIB_FRAG_NEEDED;
	}
	return OUT_SLOW_FIB_OTHER;
}

INLINE int fib_lookup(hook_ctx *ctx, const struct route *r, __u32 ip_len,
		      struct bpf_fib_lookup *fib)
{
	int rc;

	fib->family = r->dst.family;
	fib->l4_protocol = IPPROTO_UDP;
	fib->sport = r->src.port;
	fib->dport = r->dst.port;
	fib->tot_len = ip_len;
	fib->ifindex = FIB_LOOKUP_IFINDEX;
	if (r->dst.family == AF_INET) {
		fib->ipv4_src = r->src.ip.v4;
		fib->ipv4_dst = r->dst.ip.v4;
	} else {
		__builtin_memcpy(fib->ipv6_src, r->src.ip.v6, 16);
		__builtin_memcpy(fib->ipv6_dst, r->dst.ip.v6, 16);
	}
	rc = bpf_fib_lookup(ctx, fib, sizeof(*fib), 0);
	if (rc != BPF_FIB_LKUP_RET_SUCCESS)
		return fib_outcome(rc);
	if (fib->ifindex != ctx->ingress_ifindex &&
	    !bpf_map_lookup_elem(&egress_ports, &fib->ifindex))
		return OUT_SLOW_NO_EGRESS_PORT;
	return OUT_CONTINUE;
}

INLINE __u32 current_iface_gen(void)
{
	__u32 zero = 0, *gen = bpf_map_lookup_elem(&iface_gen, &zero);

	return gen ? *gen : 0;
}

/* Cached paths hold what the interfaces table said: a change voids them. */
static __always_inline __attribute__((unused)) void bump_iface_gen(void)
{
	__u32 zero = 0, *gen = bpf_map_lookup_elem(&iface_gen, &zero);

	if (gen)
		__sync_fetch_and_add(gen, 1);
}

INLINE struct iface_info *iface_of(__u32 ifindex)
{
	return bpf_map_lookup_elem(&ifaces, &ifindex);
}

/* Registered interfaces only: unregistered ones (test runs) are not checked. */
static __always_inline __attribute__((unused)) int registered(const struct iface_info *info)
{
	return info && info->flags;
}

/* Whether the frame's destination is a unicast MAC other than ours
 * (an unknown, all-zero, MAC of ours: never). */
static __always_inline __attribute__((unused)) int not_our_mac(hook_ctx *ctx, const __u8 *mac)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	int differ = 0, known = 0;

	if ((void *)(eth + 1) > data_end)
		return 0;
#pragma unroll
	for (int i = 0; i < ETH_ALEN; i++) {
		differ |= eth->h_dest[i] ^ mac[i];
		known |= mac[i];
	}
	return known && differ;
}

/* A frame seen only because the interface is promiscuous is another host's:
 * the kernel drops it (PACKET_OTHERHOST), so the fast path must not relay it. */
INLINE int for_other_host(hook_ctx *ctx)
{
#ifdef EBRTC_TC
	return ctx->pkt_type == PACKET_OTHERHOST;
#else
	struct iface_info *own = iface_of(ctx->ingress_ifindex);

	return registered(own) && not_our_mac(ctx, own->mac);
#endif
}

/* Refresh path p of route r: the FIB's answer and the interfaces' entries. */
INLINE int fill_path(hook_ctx *ctx, const struct route *r, __u32 ip_len, __u64 now, struct path *p)
{
	struct bpf_fib_lookup fib = {};
	struct iface_info *in, *out;
	/* Read before the table: a change after this read bumps it again. */
	__u32 gen = current_iface_gen();
	__u16 max_len = ip_len;
	int rc;

	rc = fib_lookup(ctx, r, ip_len, &fib);
	if (rc != OUT_CONTINUE)
		return rc;
	/* Keep the larger length already checked while the answer is the same. */
	if (p->expires > now && p->ifindex == fib.ifindex && p->ingress == ctx->ingress_ifindex &&
	    p->max_len > ip_len)
		max_len = p->max_len;
	p->max_len = max_len;
	p->expires = now + NEXTHOP_TTL_NS;
	p->ingress = ctx->ingress_ifindex;
	p->ifindex = fib.ifindex;
	p->gen = gen;
	__builtin_memcpy(p->smac, fib.smac, ETH_ALEN);
	__builtin_memcpy(p->dmac, fib.dmac, ETH_ALEN);
	in = iface_of(ctx->ingress_ifindex);
	p->in_known = registered(in);
	if (in)
		__builtin_memcpy(p->in_mac, in->mac, ETH_ALEN);
	else
		__builtin_memset(p->in_mac, 0, ETH_ALEN);
	out = iface_of(fib.ifindex);
	p->out_flags = out ? out->flags : 0;
	p->out_slot = out ? out->slot : 0;
	return OUT_CONTINUE;
}

/* Where the datagram leaves: the path cached in the route's per-CPU slot
 * (st) while fresh, for this ingress and interfaces table, and the length
 * already passed the MTU check; else looked up and cached. *out points at
 * the path to use: st's, or scratch when the route has no slot. */
INLINE int next_hop(hook_ctx *ctx, const struct route *r, __u32 ip_len, __u64 now,
		    struct flow_stats *st, struct path *scratch, struct path **out)
{
	struct path *p;
	int rc;

	if (!st) {
		scratch->expires = 0;
		*out = scratch;
		return fill_path(ctx, r, ip_len, now, scratch);
	}
	p = &st->path;
	*out = p;
	if (p->expires > now && p->ingress == ctx->ingress_ifindex && ip_len <= p->max_len &&
	    p->gen == current_iface_gen())
		return OUT_CONTINUE;
	rc = fill_path(ctx, r, ip_len, now, p);
	if (rc != OUT_CONTINUE)
		p->expires = 0;
	return rc;
}

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

/* ChannelData from a client on a listening port. */
INLINE int client_to_peer(hook_ctx *ctx, struct packet *pkt, struct emit *e, struct legs *legs)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 payload_len = pkt->udp.len - sizeof(struct udphdr);
	struct channel_hdr *ch = data + (pkt->payload_off & 0xff);
	struct route *r, *back;
	__u16 data_len;
	__u64 sum;

	if (payload_len < CHANNEL_HDR_LEN || (void *)(ch + 1) > data_end)
		return OUT_SLOW_NOT_CHANNEL_DATA;
	/* 0b01 in the top bits: ChannelData, numbers 0x4000-0x7FFF (RFC 5766 and 8656). */
	if ((bpf_ntohs(ch->number) & 0xc000) != 0x4000)
		return OUT_SLOW_NOT_CHANNEL_DATA;
	r = lookup_client_route(pkt, ch->number);
	if (!r)
		return OUT_SLOW_UNKNOWN_CHANNEL;
	data_len = bpf_ntohs(ch->len);
	/* RFC 8656 12.5: over UDP, up to 3 bytes of padding may follow the data. */
	if (CHANNEL_HDR_LEN + data_len > payload_len ||
	    payload_len > CHANNEL_HDR_LEN + ((data_len + 3) & ~3))
		return OUT_SLOW_CHANNEL_LENGTH;

	e->route = r;
	e->data_off = pkt->payload_off + CHANNEL_HDR_LEN;
	e->data_len = data_len;
	e->channel = 0;
	e->data_sum_valid = pkt->udp.csum != 0;
	if (e->data_sum_valid) {
		sum = udp_payload_sum(&pkt->ip, &pkt->udp);
		sum = csum_sub16(sum, csum_fold((__u64)ch->number + ch->len));
		__u64 pad_sum = 0;
		if (padding_sum(ctx, e->data_off + data_len, payload_len - CHANNEL_HDR_LEN - data_len,
				data_len, &pad_sum))
			return OUT_SLOW_CHANNEL_LENGTH;
		e->data_sum = csum_sub16(sum, csum_fold(pad_sum));
	}
	legs->route[0] = r;
	if (!(r->flags & ROUTE_F_PEER_IS_RELAY))
		return OUT_FAST_CLIENT_TO_PEER;

	/* The peer is one of our relay addresses: do its peer->client leg too. */
	back = lookup_peer_route(&r->src, &r->dst);
	if (!back)
		return OUT_SLOW_UNKNOWN_PEER;
	e->route = back;
	e->channel = back->channel;
	legs->route[1] = back;
	return OUT_FAST_HAIRPIN;
}

/* Plain UDP from a peer on a relay port. */
INLINE int peer_to_client(struct packet *pkt, struct emit *e, struct legs *legs)
{
	struct endpoint peer = { .ip = pkt->ip.saddr, .port = pkt->udp.sport, .family = pkt->ip.family };
	struct endpoint relay = { .ip = pkt->ip.daddr, .port = pkt->udp.dport, .family = pkt->ip.family };
	struct route *r = lookup_peer_route(&peer, &relay);

	if (!r)
		return OUT_SLOW_UNKNOWN_PEER;
	e->route = r;
	e->data_off = pkt->payload_off;
	e->data_len = pkt->udp.len - sizeof(struct udphdr);
	e->channel = r->channel;
	e->data_sum_valid = pkt->udp.csum != 0;
	if (e->data_sum_valid)
		e->data_sum = udp_payload_sum(&pkt->ip, &pkt->udp);
	legs->route[0] = r;
	return OUT_FAST_PEER_TO_CLIENT;
}

/* The 5-tuple of a snooped message, client side first. */
INLINE void snoop_tuple(struct snoop_event *ev, const struct ip_info *ip, const struct udp_info *udp,
			int from_client)
{
	const union ip_addr *client = from_client ? &ip->saddr : &ip->daddr;
	const union ip_addr *server = from_client ? &ip->daddr : &ip->saddr;

	__builtin_memcpy(ev->client, client->bytes, 16);
	__builtin_memcpy(ev->server, server->bytes, 16);
	ev->client_port = from_client ? udp->sport : udp->dport;
	ev->server_port = from_client ? udp->dport : udp->sport;
	ev->family = ip->family;
}

#define HOOK_LOAD(ctx, off, buf, n) hook_load_bytes(ctx, off, buf, n)
#define SKB_LOAD(ctx, off, buf, n) bpf_skb_load_bytes(ctx, off, buf, n)

/* Parse a client's TURN request and hand what it says to user space. */
INLINE void snoop_request(hook_ctx *ctx, const struct packet *pkt)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct stun_hdr *hdr = data + (pkt->payload_off & 0xff);
	__u32 payload_len = pkt->udp.len - sizeof(struct udphdr);
	struct snoop_event ev = { .direction = SNOOP_REQUEST };

	if (!stun_is_turn_control(hdr, data_end, payload_len, 0))
		return;
	ev.stun_type = bpf_ntohs(hdr->type);
	__builtin_memcpy(ev.txid, hdr->txid, 12);
	snoop_tuple(&ev, &pkt->ip, &pkt->udp, 1);
	if (STUN_WALK_ATTRS(HOOK_LOAD, ctx, pkt->payload_off + STUN_HDR_LEN, payload_len - STUN_HDR_LEN, &ev))
		return;
	bpf_ringbuf_output(&snoop_events, &ev, sizeof(ev), 0);
}

INLINE int classify(hook_ctx *ctx, const struct offload_config *cfg, struct packet *pkt,
		    struct emit *e, struct legs *legs)
{
	if (is_listen_port(cfg, pkt->udp.dport)) {
		int out = client_to_peer(ctx, pkt, e, legs);

		if (out == OUT_SLOW_NOT_CHANNEL_DATA && (cfg->flags & CONFIG_F_SNOOP) && !for_other_host(ctx))
			snoop_request(ctx, pkt);
		return out;
	}
	if (is_relay_port(cfg, pkt->udp.dport))
		return peer_to_client(pkt, e, legs);
	return OUT_PASS_NOT_TURN;
}

/* Whether the allocation behind route r is over its bandwidth limit. */
INLINE int over_limit(const struct offload_config *cfg, const struct route *r, __u32 len, __u64 now)
{
	__u32 idx = r->bucket;
	struct rate_bucket *b;

	if (!cfg->rate_limit || idx == NO_BUCKET)
		return 0;
	b = bpf_map_lookup_elem(&rate_buckets, &idx);
	return b && !bucket_take(b, cfg->rate_limit, cfg->rate_burst, len, now);
}

/* Where the source came from: the kernel's input checks (source.h). A
 * passing verdict is kept in the first route (the source is its other end,
 * peer or client) for a second, for this ingress interface only. */
INLINE int admit_source(hook_ctx *ctx, const struct packet *pkt, struct route *first, __u64 now)
{
	__u32 ingress = ctx->ingress_ifindex;
	int out;

	if (first && first->src_ifindex == ingress && first->src_until > now)
		return OUT_CONTINUE;
	out = check_source(ctx, &pkt->ip, ingress);
	if (out != OUT_CONTINUE)
		return out;
	if (first) {
		first->src_ifindex = ingress;
		first->src_until = now + SOURCE_TTL_NS;
	}
	return OUT_CONTINUE;
}

/* Whether the server's heartbeat sample takes this packet, then whether the
 * allocation may send it: last, so a packet refused earlier costs no tokens. */
INLINE int admit_rate(const struct offload_config *cfg, const struct legs *legs,
		      struct flow_stats *flows_of[2], __u32 len, __u64 now)
{
	if (spill(cfg, flows_of[0], now))
		return OUT_SLOW_SPILL;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		if (legs->route[i] && over_limit(cfg, legs->route[i], len, now)) {
			if (flows_of[i])
				flows_of[i]->dropped++;
			return OUT_DROP_RATE_LIMIT;
		}
	}
	return OUT_CONTINUE;
}

INLINE struct flow_stats *flow_of(const struct route *r)
{
	__u32 slot;

	if (!r)
		return NULL;
	slot = r->stats_slot;
	return bpf_map_lookup_elem(&flows, &slot);
}

#ifndef EBRTC_TC
/* XDP frames reach an interface only if its driver takes them (a veth only
 * when its peer runs XDP); user space says which do. Returns OUT_CONTINUE
 * to send from XDP, HOOK_TO_TC when TC on this interface takes over, or a
 * slow-path outcome. */
#define HOOK_TO_TC (OUT_MAX + 1)

/* Hand the packet to TC on this interface (HOOK_TO_TC), marked in its
 * metadata, or, where no TC runs or the driver keeps no metadata, to the
 * kernel with the fallback outcome. */
INLINE int xdp_to_tc(hook_ctx *ctx, int fallback)
{
	struct iface_info *in = iface_of(ctx->ingress_ifindex);
	__u32 *meta;

	if (!in || !(in->flags & IFACE_F_TC) || bpf_xdp_adjust_meta(ctx, -(int)sizeof(*meta)))
		return fallback;
	meta = (void *)(long)ctx->data_meta;
	if ((void *)(meta + 1) > (void *)(long)ctx->data)
		return fallback;
	*meta = HOOK_META_TO_TC;
	return HOOK_TO_TC;
}

INLINE int xdp_can_send(hook_ctx *ctx, const struct path *p)
{
	if (!p->out_flags || (p->out_flags & IFACE_F_XDP_EGRESS))
		return OUT_CONTINUE;
	return xdp_to_tc(ctx, OUT_SLOW_NO_EGRESS_PORT);
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_IFACE_SLOTS);
	__type(key, __u32);
	__type(value, struct xmit_pending);
} xmit_pending SEC(".maps");

INLINE struct xmit_pending *pending_of(__u32 slot)
{
	return bpf_map_lookup_elem(&xmit_pending, &slot);
}

/* A fast datagram leaves from XDP along p (unregistered egress: test runs). */
INLINE void note_pending(const struct path *p, int fast)
{
	struct xmit_pending *pend;

	if (!p->out_flags || fast < 0 || fast > OUT_FAST_HAIRPIN)
		return;
	pend = pending_of(p->out_slot);
	if (pend) {
		pend->kinds[fast & 3]++;
		pend->last = fast;
	}
}

INLINE int send(hook_ctx *ctx, __u32 egress)
{
	if (egress == ctx->ingress_ifindex)
		return XDP_TX;
	/* An interface detached since the entry was cached: drop, never pass a rewritten frame. */
	return bpf_redirect_map(&egress_ports, egress, XDP_DROP);
}
#else
INLINE int send(hook_ctx *ctx, __u32 egress)
{
	return bpf_redirect(egress, 0);
}

/* Whether TC should look at this skb. Where XDP runs too, it judged every
 * packet already, and hands over only the marked ones. */
INLINE int tc_takes(hook_ctx *ctx)
{
	struct iface_info *in = iface_of(ctx->ingress_ifindex);
	__u32 *meta = (void *)(long)ctx->data_meta;

	if (!in || !(in->flags & IFACE_F_XDP))
		return 1;
	return (void *)(meta + 1) <= (void *)(long)ctx->data && *meta == HOOK_META_TO_TC;
}

/* The headers (up to a STUN header) in the linear part, where the parsers
 * read them; the payload may stay in pages, read and moved by helpers. */
#define TC_HEADERS (ETH_HLEN + sizeof(struct ipv6hdr) + sizeof(struct udphdr) + STUN_HDR_LEN)

INLINE int tc_prepare(hook_ctx *ctx)
{
	__u32 want = ctx->len < TC_HEADERS ? ctx->len : TC_HEADERS;

	if ((long)ctx->data_end - (long)ctx->data < want && bpf_skb_pull_data(ctx, want))
		return OUT_SLOW_NONLINEAR;
	return OUT_CONTINUE;
}
#endif

/* From a parsed packet to its verdict and, on the fast path, the rewritten
 * packet. *action is what the hook returns. */
INLINE int process(hook_ctx *ctx, struct packet *pkt, int *action)
{
	struct emit e = {};
	struct legs legs = {};
	struct flow_stats *flows_of[2];
	struct path scratch, *path;
	__u32 zero = 0;
	struct offload_config *cfg;
	int fast, out;
	__u64 now;

#ifdef EBRTC_TC
	if (for_other_host(ctx))
		return OUT_PASS_OTHER_HOST;
#endif
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg)
		return OUT_PASS_NOT_TURN;
	fast = classify(ctx, cfg, pkt, &e, &legs);
	if (fast > OUT_FAST_HAIRPIN)
		return for_other_host(ctx) ? OUT_PASS_OTHER_HOST : fast;
#ifdef EBRTC_TC
	/* Several datagrams in one skb (GSO, GRO): one rewrite cannot serve them. */
	if (ctx->gso_segs > 1 || ctx->gso_size)
		return OUT_SLOW_GSO;
#endif
	now = coarse_now();
	out = admit_source(ctx, pkt, legs.route[0], now);
	if (out != OUT_CONTINUE)
		return out;
	e.in_family = pkt->ip.family;
	e.tos = pkt->ip.tos;
	e.df = pkt->ip.df;
	e.ttl = e.route->dst.family == AF_INET ? cfg->ipv4_ttl : cfg->ipv6_hop_limit;
#ifdef EBRTC_TC
	__u8 summed;

	out = csum_state(ctx, pkt, &summed);
	if (out != OUT_CONTINUE)
		return out;
	e.csum_partial = summed == CHECKSUM_PARTIAL;
#else
	/* Before the next-hop lookup: such a datagram is TC's whatever its route. */
	if (udp_maybe_partial(&pkt->udp, udp_pseudo_fold(&pkt->ip, &pkt->udp)))
		return xdp_to_tc(ctx, OUT_SLOW_CHECKSUM_OFFLOAD);
#endif
	/* One lookup of each leg's per-CPU slot serves the path, the checks
	 * and the counts; the emitted route is the last leg's. */
	flows_of[0] = flow_of(legs.route[0]);
	flows_of[1] = flow_of(legs.route[1]);
	out = next_hop(ctx, e.route, out_ip_len(&e), now, legs.route[1] ? flows_of[1] : flows_of[0],
		       &scratch, &path);
	if (out != OUT_CONTINUE)
		return out;
#ifndef EBRTC_TC
	if (path->in_known && not_our_mac(ctx, path->in_mac))
		return OUT_PASS_OTHER_HOST;
	out = xdp_can_send(ctx, path);
	if (out != OUT_CONTINUE)
		return out;
#endif
	out = admit_rate(cfg, &legs, flows_of, e.data_len, now);
	if (out == OUT_DROP_RATE_LIMIT)
		*action = HOOK_DROP;
	if (out != OUT_CONTINUE)
		return out;
#ifdef EBRTC_TC
	/* The device's sum over the old bytes will not hold: a grown tail turns
	 * it into CHECKSUM_NONE, so a local receiver verifies the new checksum. */
	if (summed == CHECKSUM_COMPLETE) {
		if (bpf_skb_change_tail(ctx, ctx->len + 1, 0))
			return OUT_SLOW_CHECKSUM_OFFLOAD;
		if (bpf_skb_change_tail(ctx, ctx->len - 1, 0)) {
			*action = HOOK_DROP;
			return OUT_DROP_REWRITE_FAILED;
		}
	}
#endif
	out = rewrite(ctx, &e, path);
	if (out == OUT_DROP_REWRITE_FAILED)
		*action = HOOK_DROP;
	if (out != OUT_CONTINUE)
		return out;
	*action = send(ctx, path->ifindex);
#ifndef EBRTC_TC
	note_pending(path, fast);
#endif
	count_flow(flows_of[0], e.data_len, now);
	count_flow(flows_of[1], e.data_len, now);
	/* Fast outcomes count relayed data bytes, like the user-space counters. */
	count_outcome(fast, e.data_len);
	return OUT_CONTINUE;
}

#ifndef EBRTC_TC
SEC("xdp")
int turn_offload(struct xdp_md *ctx)
{
	__u32 frame_len = ctx->data_end - ctx->data;
	struct packet pkt = {};
	int action = HOOK_PASS;
	int out;

	out = parse(ctx, &pkt);
	if (out == OUT_CONTINUE)
		out = process(ctx, &pkt, &action);
	if (out != OUT_CONTINUE && out != HOOK_TO_TC)
		count_outcome(out, frame_len);
	return action;
}
#else
SEC("tc")
int turn_offload_tc(struct __sk_buff *ctx)
{
	__u32 frame_len = ctx->len;
	struct packet pkt = {};
	int action = HOOK_PASS;
	int out;

	if (!tc_takes(ctx))
		return HOOK_PASS;
	out = tc_prepare(ctx);
	if (out == OUT_CONTINUE)
		out = parse(ctx, &pkt);
	if (out == OUT_CONTINUE)
		out = process(ctx, &pkt, &action);
	if (out != OUT_CONTINUE)
		count_outcome(out, frame_len);
	return action;
}
#endif

#ifndef EBRTC_TC
struct net_device {
	int ifindex;
} __attribute__((preserve_access_index));

#define ENXIO 6
#define EOPNOTSUPP 95

/* Frames sent from XDP that a device of ours did not take are counted. If
 * the device takes no XDP frames at all (a veth whose peer runs no XDP:
 * ENXIO; no XDP transmit: EOPNOTSUPP), it stops being an XDP egress at once,
 * so the next datagrams go to TC (or the kernel where no TC runs) rather
 * than into the same hole. A full ring or a link going down only counts. */
/* Charge n refused frames of kind k to the interface's directions. */
INLINE void charge(struct iface_info *info, int k, __u32 n)
{
	if (!n)
		return;
	if (k != OUT_FAST_PEER_TO_CLIENT)
		__sync_fetch_and_add(&info->failed_to_peer, n);
	if (k != OUT_FAST_CLIENT_TO_PEER)
		__sync_fetch_and_add(&info->failed_to_client, n);
}

/* Split drops over the kinds pending on this CPU: all of them when the
 * whole queue failed (a device that takes no XDP frames), in proportion
 * otherwise, the rounding going to the latest kind. */
INLINE void attribute(struct iface_info *info, struct xmit_pending *p, __u32 drops)
{
	__u32 total = p->kinds[0] + p->kinds[1] + p->kinds[2], left = drops, n;

	if (!total)
		return; /* not ours: another program's frames */
#pragma unroll
	for (int k = 0; k < 3; k++) {
		n = drops >= total ? p->kinds[k] : (__u32)((__u64)drops * p->kinds[k] / total);
		n = n < left ? n : left;
		charge(info, k, n);
		left -= n;
	}
	if (left && drops < total)
		charge(info, p->last & 3, left);
}

/* Frames sent from XDP that a device of ours did not take are counted. If
 * the device takes no XDP frames at all (a veth whose peer runs no XDP:
 * ENXIO; no XDP transmit: EOPNOTSUPP), it stops being an XDP egress at once,
 * so the next datagrams go to TC (or the kernel where no TC runs) rather
 * than into the same hole. A full ring or a link going down only counts.
 * flushed: the device's queue on this CPU went out (pending starts afresh). */
INLINE void xmit_failed(__u32 ifindex, int drops, int err, int flushed)
{
	__u32 out = OUT_DROP_XMIT_FAILED;
	struct iface_info *info = iface_of(ifindex);
	struct xmit_pending *p;
	struct outcome_stats *s;

	if (!registered(info))
		return;
	p = pending_of(info->slot);
	if (drops > 0) {
		if ((err == -ENXIO || err == -EOPNOTSUPP) && (info->flags & IFACE_F_XDP_EGRESS)) {
			__sync_fetch_and_and(&info->flags, ~IFACE_F_XDP_EGRESS);
			bump_iface_gen();
		}
		__sync_fetch_and_add(&info->xmit_failures, drops);
		s = bpf_map_lookup_elem(&outcomes, &out);
		if (s)
			s->packets += drops;
		if (p)
			attribute(info, p, drops);
	}
	if (p && flushed) {
		p->kinds[0] = p->kinds[1] = p->kinds[2] = 0;
	} else if (p && drops > 0) {
		/* One frame refused at once: the latest. */
		__u32 k = p->last & 3;

		if (k < 3 && p->kinds[k])
			p->kinds[k]--;
	}
}

/* XDP_TX batches a driver could not send (a veth whose peer runs no XDP). */
SEC("tp_btf/xdp_bulk_tx")
int xdp_bulk_tx_failed(__u64 *ctx)
{
	xmit_failed(((const struct net_device *)ctx[0])->ifindex, (int)ctx[2], (int)ctx[3], 1);
	return 0;
}

/* An XDP_TX a driver refused at once. */
SEC("tp_btf/xdp_exception")
int xdp_tx_exception(__u64 *ctx)
{
	if ((__u32)ctx[2] == XDP_TX)
		xmit_failed(((const struct net_device *)ctx[0])->ifindex, 1, 0, 0);
	return 0;
}

/* A redirect refused when it was made (a target without XDP transmit);
 * for egress_ports the index is the target's ifindex. */
SEC("tp_btf/xdp_redirect_err")
int xdp_redirect_failed(__u64 *ctx)
{
	if ((__u32)ctx[4] == BPF_MAP_TYPE_DEVMAP_HASH)
		xmit_failed((__u32)ctx[6], 1, (int)ctx[3], 0);
	return 0;
}

/* Redirect batches the target device refused. */
SEC("tp_btf/xdp_devmap_xmit")
int xdp_devmap_xmit_failed(__u64 *ctx)
{
	xmit_failed(((const struct net_device *)ctx[1])->ifindex, (int)ctx[3], (int)ctx[4], 1);
	return 0;
}

/* TC egress on client-facing interfaces: parse the server's responses to
 * TURN control requests. Only responses leaving this host count, so a
 * "success response" spoofed towards the server can never teach the snooper. */
SEC("tc")
int turn_snoop_egress(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct offload_config *cfg = bpf_map_lookup_elem(&config, &zero);
	struct snoop_event ev = { .direction = SNOOP_RESPONSE };
	struct ip_info ip = {};
	struct udp_info udp = {};
	void *data, *data_end, *l4;
	struct stun_hdr *hdr;
	__u32 payload_len, payload_off;
	__u16 proto;

	if (!cfg || !(cfg->flags & CONFIG_F_SNOOP))
		return TC_ACT_UNSPEC;
	/* Headers of a locally sent datagram are linear, but be sure. */
	bpf_skb_pull_data(skb, ETH_HLEN + sizeof(struct ipv6hdr) + sizeof(struct udphdr) + STUN_HDR_LEN);
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (eth_parse(data, data_end, &proto) != OUT_CONTINUE)
		return TC_ACT_UNSPEC;
	if (proto == ETH_P_IP) {
		if (ipv4_parse(data + ETH_HLEN, data_end, skb->len - ETH_HLEN, &ip) != OUT_CONTINUE)
			return TC_ACT_UNSPEC;
		l4 = data + ETH_HLEN + sizeof(struct iphdr);
	} else {
		if (ipv6_parse(data + ETH_HLEN, data_end, skb->len - ETH_HLEN, &ip) != OUT_CONTINUE)
			return TC_ACT_UNSPEC;
		l4 = data + ETH_HLEN + sizeof(struct ipv6hdr);
	}
	if (udp_parse(l4, data_end, &ip, &udp) != OUT_CONTINUE || !is_listen_port(cfg, udp.sport))
		return TC_ACT_UNSPEC;
	hdr = l4 + sizeof(struct udphdr);
	payload_len = udp.len - sizeof(struct udphdr);
	if (!stun_is_turn_control(hdr, data_end, payload_len, 1))
		return TC_ACT_UNSPEC;
	ev.stun_type = bpf_ntohs(hdr->type);
	__builtin_memcpy(ev.txid, hdr->txid, 12);
	snoop_tuple(&ev, &ip, &udp, 0);
	payload_off = (void *)hdr - data;
	if (STUN_WALK_ATTRS(SKB_LOAD, skb, payload_off + STUN_HDR_LEN, payload_len - STUN_HDR_LEN, &ev))
		return TC_ACT_UNSPEC;
	bpf_ringbuf_output(&snoop_events, &ev, sizeof(ev), 0);
	return TC_ACT_UNSPEC;
}
#endif
