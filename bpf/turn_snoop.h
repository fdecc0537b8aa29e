// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* The TURN control messages the snooper copies to user space (either
 * hook's request parse in bpf/turn_offload.c, the responses' in
 * bpf/turn_snoop.c): their 5-tuple and what the STUN walk found. */
#ifndef EBRTC_TURN_SNOOP_H
#define EBRTC_TURN_SNOOP_H

#include "common.h"
#include "ip.h"
#include "udp.h"
#include "stun.h"
#include "turn.h"
#include "hook.h"
#include "turn_maps.h"
#include "turn_packet.h"

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

#endif
