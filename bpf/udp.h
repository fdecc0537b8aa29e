/* UDP parsing and header construction. */
#ifndef EBRTC_UDP_H
#define EBRTC_UDP_H

#include "common.h"
#include "csum.h"
#include "ip.h"
#include "outcome.h"

struct udp_info {
	__be16 sport;
	__be16 dport;
	__u16 len;   /* UDP length incl. header, host order */
	__u16 csum;  /* raw checksum field */
};

INLINE int udp_parse(struct udphdr *udph, void *data_end, const struct ip_info *ip,
		     struct udp_info *udp)
{
	if ((void *)(udph + 1) > data_end)
		return OUT_SLOW_BAD_LENGTH;
	udp->len = bpf_ntohs(udph->len);
	/* Equal lengths: no surplus bytes after UDP inside the IP payload. */
	if (udp->len != ip->payload_len)
		return OUT_SLOW_BAD_LENGTH;
	udp->sport = udph->source;
	udp->dport = udph->dest;
	udp->csum = udph->check;
	/* RFC 8200: zero is not a valid IPv6 UDP checksum; the kernel drops it. */
	if (ip->family == AF_INET6 && udp->csum == 0)
		return OUT_SLOW_ZERO_UDP_CHECKSUM;
	return OUT_CONTINUE;
}

/* Folded sum of the datagram's pseudo-header. */
INLINE __u16 udp_pseudo_fold(const struct ip_info *ip, const struct udp_info *udp)
{
	return csum_fold(csum_pseudo(&ip->saddr, &ip->daddr, ip->family, udp->len));
}

/* XDP cannot see whether the sender left the UDP checksum to its device
 * (CHECKSUM_PARTIAL: a veth from a local sender): then the field holds the
 * pseudo-header sum alone (pseudo: udp_pseudo_fold). A full checksum equal
 * to it by chance (1 in 65536) is only taken for partial, and goes where
 * the skb is known (TC, or the kernel). */
INLINE int udp_maybe_partial(const struct udp_info *udp, __u16 pseudo)
{
	return udp->csum && udp->csum == pseudo;
}

/* Sum of the UDP payload, recovered from the incoming checksum (RFC 1624 style):
 * payload = ~check - pseudo-header - UDP header. A corrupted payload keeps a
 * wrong checksum after the rewrite, so the receiver still detects it. */
INLINE __u64 udp_payload_sum(const struct ip_info *ip, const struct udp_info *udp)
{
	__u64 sum = (__u16)~udp->csum;

	sum = csum_sub16(sum, csum_fold(csum_pseudo(&ip->saddr, &ip->daddr, ip->family, udp->len)));
	sum = csum_sub16(sum, csum_fold((__u64)udp->sport + udp->dport + bpf_htons(udp->len)));
	return sum;
}

INLINE void udp_write(struct udphdr *udph, __be16 sport, __be16 dport, __u16 len)
{
	udph->source = sport;
	udph->dest = dport;
	udph->len = bpf_htons(len);
	udph->check = 0;
}

#endif
