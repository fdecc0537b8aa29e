/* Ethernet parsing. VLAN-tagged frames are not parsed: they take the slow path. */
#ifndef EBRTC_ETH_H
#define EBRTC_ETH_H

#include "common.h"
#include "outcome.h"

INLINE int eth_parse(void *data, void *data_end, __u16 *proto)
{
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return OUT_PASS_NOT_IP;
	*proto = bpf_ntohs(eth->h_proto);
	if (*proto == ETH_P_8021Q || *proto == ETH_P_8021AD)
		return OUT_SLOW_VLAN;
	if (*proto != ETH_P_IP && *proto != ETH_P_IPV6)
		return OUT_PASS_NOT_IP;
	return OUT_CONTINUE;
}

INLINE void eth_write(struct ethhdr *eth, const __u8 *dst, const __u8 *src, __u16 proto)
{
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	eth->h_proto = bpf_htons(proto);
}

#endif
