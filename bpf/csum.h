/* Internet checksum helpers (RFC 1071 / RFC 1624).
 *
 * Sums are kept as 64-bit accumulators of raw (network-order) memory words and
 * folded at the end: the one's complement sum is byte-order independent as long
 * as every term is added in the order it sits in memory.
 */
#ifndef EBRTC_CSUM_H
#define EBRTC_CSUM_H

#include "common.h"

INLINE __u16 csum_fold(__u64 sum)
{
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffffffff) + (sum >> 32);
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/* One's complement subtraction: a - b == a + ~b. */
INLINE __u64 csum_sub16(__u64 sum, __u16 folded)
{
	return sum + (__u16)~folded;
}

INLINE __u64 csum_addr(const union ip_addr *a, int family)
{
	if (family == AF_INET)
		return a->v4;
	return (__u64)a->v6[0] + a->v6[1] + a->v6[2] + a->v6[3];
}

/* Sum of the UDP pseudo-header (RFC 768 / RFC 8200 section 8.1). */
INLINE __u64 csum_pseudo(const union ip_addr *src, const union ip_addr *dst,
			 int family, __u16 udp_len)
{
	__u64 sum = csum_addr(src, family) + csum_addr(dst, family);

	return sum + bpf_htons(IPPROTO_UDP) + bpf_htons(udp_len);
}

/* A single byte at an even or odd offset from the start of the checksummed area. */
INLINE __u16 csum_byte(__u8 b, int odd)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	return odd ? (__u16)b << 8 : b;
#else
	return odd ? b : (__u16)b << 8;
#endif
}

/* Checksum of a 20-byte IPv4 header without options, checksum field included. */
INLINE __u16 ipv4_header_csum(const struct iphdr *iph)
{
	const __u16 *w = (const __u16 *)iph;
	__u64 sum = 0;

#pragma unroll
	for (int i = 0; i < 10; i++)
		sum += w[i];
	return ~csum_fold(sum);
}

/* Final UDP checksum field value from a sum: 0 is sent as 0xffff (RFC 768). */
INLINE __u16 udp_csum_finish(__u64 sum)
{
	__u16 csum = ~csum_fold(sum);

	return csum ? csum : 0xffff;
}

#endif
