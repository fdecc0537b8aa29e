// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Where a fast datagram leaves (bpf/turn_offload.c): the FIB's answer
 * cached per route and CPU, the interfaces table and its generation (a
 * change voids the cached paths), frames meant for other hosts, and the
 * XDP frames pending per egress (bpf/turn_xmit.c counts those a device
 * refused). */
#ifndef EBRTC_TURN_PATH_H
#define EBRTC_TURN_PATH_H

#include "common.h"
#include "turn.h"
#include "hook.h"
#include "turn_maps.h"
#include "turn_packet.h"
#include "outcome.h"
#include "clock.h"
#include <linux/if_packet.h>

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

#ifndef EBRTC_TC
INLINE struct xmit_pending *pending_of(__u32 slot)
{
	return bpf_map_lookup_elem(&xmit_pending, &slot);
}
#endif

#endif
