// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* The TURN fast path's view of a datagram (bpf/turn_offload.c, both
 * builds): what parsing learned, the datagram to emit and the routes it
 * follows; parsing to the UDP payload, the configured ports, and the
 * channel and peer route lookups. */
#ifndef EBRTC_TURN_PACKET_H
#define EBRTC_TURN_PACKET_H

#include "common.h"
#include "eth.h"
#include "ip.h"
#include "udp.h"
#include "turn.h"
#include "hook.h"
#include "turn_maps.h"

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

#endif
