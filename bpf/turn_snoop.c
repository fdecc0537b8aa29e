// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* The TURN snooper's egress half: the server's responses to TURN control
 * requests, parsed at TC egress on client-facing interfaces (the requests
 * are parsed at ingress by bpf/turn_offload.c), sharing the fast path's
 * maps (internal/offload loads it onto the XDP object's). */
#include "common.h"
#include "eth.h"
#include "ip.h"
#include "udp.h"
#include "stun.h"
#include "turn.h"
#include "turn_maps.h"
#include "turn_packet.h"
#include "turn_snoop.h"
#include <linux/pkt_cls.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

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
