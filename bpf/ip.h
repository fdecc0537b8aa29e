/* IPv4 and IPv6 parsing and header construction.
 *
 * Only the plain shapes are parsed (IPv4 without options, IPv6 without extension
 * headers, no fragments); everything else is reported so it can take the slow path.
 */
#ifndef EBRTC_IP_H
#define EBRTC_IP_H

#include "common.h"
#include "csum.h"
#include "outcome.h"

#define IPV4_DF 0x4000
#define IPV4_MF_OFFSET 0x3fff

/* What the rewrite needs to know about the incoming IP header. */
struct ip_info {
	union ip_addr saddr;
	union ip_addr daddr;
	__u16 payload_len; /* bytes after the IP header, host order */
	__u8 family;
	__u8 tos;          /* DSCP + ECN, or the IPv6 traffic class */
	__u8 df;
};

/* avail: bytes from the IP header to the frame's end, which may lie beyond
 * data_end in an skb whose payload is not linear. */
INLINE int ipv4_parse(struct iphdr *iph, void *data_end, __u32 avail, struct ip_info *ip)
{
	__u16 tot_len;

	if ((void *)(iph + 1) > data_end)
		return OUT_SLOW_BAD_LENGTH;
	if (iph->version != 4)
		return OUT_SLOW_BAD_LENGTH;
	if (iph->ihl != 5)
		return OUT_SLOW_IP_OPTIONS;
	if (iph->frag_off & bpf_htons(IPV4_MF_OFFSET))
		return OUT_SLOW_FRAGMENT;
	if (iph->protocol != IPPROTO_UDP)
		return OUT_PASS_NOT_UDP;
	tot_len = bpf_ntohs(iph->tot_len);
	if (tot_len < sizeof(*iph) + sizeof(struct udphdr) || tot_len > avail)
		return OUT_SLOW_BAD_LENGTH;
	/* The kernel drops a bad header checksum; a rewrite must not launder it. */
	if (ipv4_header_csum(iph) != 0)
		return OUT_SLOW_BAD_IP_CHECKSUM;

	ip->family = AF_INET;
	ip->saddr.v4 = iph->saddr;
	ip->daddr.v4 = iph->daddr;
	ip->payload_len = tot_len - sizeof(*iph);
	ip->tos = iph->tos;
	ip->df = !!(iph->frag_off & bpf_htons(IPV4_DF));
	return OUT_CONTINUE;
}

INLINE int ipv6_is_ext_header(__u8 nexthdr)
{
	switch (nexthdr) {
	case IPPROTO_HOPOPTS:
	case IPPROTO_ROUTING:
	case IPPROTO_DSTOPTS:
	case IPPROTO_AH:
	case IPPROTO_ESP:
	case 135: /* mobility */
	case 139: /* HIP */
	case 140: /* shim6 */
		return 1;
	}
	return 0;
}

INLINE int ipv6_parse(struct ipv6hdr *ip6h, void *data_end, __u32 avail, struct ip_info *ip)
{
	__u16 payload_len;

	if ((void *)(ip6h + 1) > data_end)
		return OUT_SLOW_BAD_LENGTH;
	if (ip6h->version != 6)
		return OUT_SLOW_BAD_LENGTH;
	if (ip6h->nexthdr == IPPROTO_FRAGMENT)
		return OUT_SLOW_FRAGMENT;
	if (ipv6_is_ext_header(ip6h->nexthdr))
		return OUT_SLOW_IPV6_EXT_HEADER;
	if (ip6h->nexthdr != IPPROTO_UDP)
		return OUT_PASS_NOT_UDP;
	payload_len = bpf_ntohs(ip6h->payload_len);
	if (payload_len < sizeof(struct udphdr) || sizeof(*ip6h) + payload_len > avail)
		return OUT_SLOW_BAD_LENGTH;

	ip->family = AF_INET6;
	__builtin_memcpy(ip->saddr.v6, &ip6h->saddr, 16);
	__builtin_memcpy(ip->daddr.v6, &ip6h->daddr, 16);
	ip->payload_len = payload_len;
	ip->tos = (ip6h->priority << 4) | (ip6h->flow_lbl[0] >> 4);
	ip->df = 1;
	return OUT_CONTINUE;
}

/* bpf_fib_lookup answers only for an ingress interface whose forwarding
 * sysctl is on. The program asks as if from loopback (ifindex 1), the one
 * interface whose forwarding user space turns on: nothing arrives on lo from
 * outside, so the host forwards nothing it did not before. */
#define FIB_LOOKUP_IFINDEX 1

INLINE __u32 ip_header_len(int family)
{
	return family == AF_INET ? sizeof(struct iphdr) : sizeof(struct ipv6hdr);
}

/* A fresh IPv4 header for a datagram the relay originates (RFC 8656 section 14:
 * default TTL, DSCP/ECN and DF carried over from the incoming packet). id
 * must be unique per source and destination when DF is clear (RFC 6864). */
INLINE void ipv4_write(struct iphdr *iph, const union ip_addr *src, const union ip_addr *dst,
		       __u16 payload_len, __u8 tos, __u8 df, __u8 ttl, __u16 id)
{
	iph->version = 4;
	iph->ihl = 5;
	iph->tos = tos;
	iph->tot_len = bpf_htons(sizeof(*iph) + payload_len);
	iph->id = bpf_htons(id);
	iph->frag_off = df ? bpf_htons(IPV4_DF) : 0;
	iph->ttl = ttl;
	iph->protocol = IPPROTO_UDP;
	iph->check = 0;
	iph->saddr = src->v4;
	iph->daddr = dst->v4;
	iph->check = ipv4_header_csum(iph);
}

/* A fresh IPv6 header: traffic class carried over, flow label 0, default hop limit. */
INLINE void ipv6_write(struct ipv6hdr *ip6h, const union ip_addr *src, const union ip_addr *dst,
		       __u16 payload_len, __u8 tclass, __u8 hop_limit)
{
	ip6h->version = 6;
	ip6h->priority = tclass >> 4;
	ip6h->flow_lbl[0] = (tclass & 0x0f) << 4;
	ip6h->flow_lbl[1] = 0;
	ip6h->flow_lbl[2] = 0;
	ip6h->payload_len = bpf_htons(payload_len);
	ip6h->nexthdr = IPPROTO_UDP;
	ip6h->hop_limit = hop_limit;
	__builtin_memcpy(&ip6h->saddr, src->v6, 16);
	__builtin_memcpy(&ip6h->daddr, dst->v6, 16);
}

#endif
