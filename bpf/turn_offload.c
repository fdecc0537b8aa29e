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
 * objects share one set of maps (turn_maps.h), and so do the objects of
 * turn_xmit.c (XDP frames an egress refused) and turn_snoop.c (the
 * server's responses, snooped at TC egress).
 *
 * This file holds the per-packet decisions; what they draw on is in
 * headers apart: parsing and route lookups (turn_packet.h), the egress
 * path (turn_path.h), resizing the frame (turn_resize.h), writing the new
 * headers and checksums (turn_emit.h), the request snooper (turn_snoop.h).
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
#include "turn_packet.h"
#include "turn_path.h"
#include "turn_resize.h"
#include "turn_emit.h"
#include "turn_snoop.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

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

/* Which direction the datagram takes, by the port it came to; a client's
 * TURN request on the way is snooped. */
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
