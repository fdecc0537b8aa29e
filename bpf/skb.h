/* The skb behind a TC program's context: how it carries its checksum. */
#ifndef EBRTC_SKB_H
#define EBRTC_SKB_H

#include "common.h"
#include <bpf/bpf_core_read.h>

extern void *bpf_cast_to_kern_ctx(void *) __ksym;

struct sk_buff {
	__u8 ip_summed : 2;
	__u16 csum_start;
	__u16 csum_offset;
	__u16 mac_header;
} __attribute__((preserve_access_index));

#define CHECKSUM_COMPLETE 2
#define CHECKSUM_PARTIAL 3

INLINE __u8 skb_ip_summed(struct __sk_buff *ctx)
{
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);

	return BPF_CORE_READ_BITFIELD(skb, ip_summed);
}

/* Whether a partial checksum is the one of the UDP header at udp_off (from
 * the frame's start), not of something else (a tunnel's inner header). */
INLINE int skb_partial_is_udp(struct __sk_buff *ctx, __u32 udp_off)
{
	struct sk_buff *skb = bpf_cast_to_kern_ctx(ctx);

	return skb->csum_start == skb->mac_header + udp_off &&
	       skb->csum_offset == offsetof(struct udphdr, check);
}

#endif
