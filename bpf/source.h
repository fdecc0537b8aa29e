/* Source address validation: what the kernel's input path would refuse.
 *
 * The kernel drops a datagram whose source is a martian (unspecified,
 * loopback, multicast, limited broadcast, or one of this host's own
 * addresses) and, with rp_filter, one that arrives on an interface its
 * source is not routed back through. A fast path that skipped these checks
 * would relay what the slow path never sees: e.g. a frame spoofed from our
 * own relay address into a hairpinned call. Here the reverse route must leave
 * through the ingress interface (strict reverse path, whatever rp_filter
 * says): stricter than the kernel at most, and what fails is handed to the
 * kernel, which applies the host's own policy. A route remembers for a second
 * that its source passed on an interface (turn_offload.c), so the lookup
 * runs about once a second per route, and on every refused packet.
 */
#ifndef EBRTC_SOURCE_H
#define EBRTC_SOURCE_H

#include "common.h"
#include "ip.h"
#include "outcome.h"

#define SOURCE_TTL_NS 1000000000ULL

/* Address classes the kernel never accepts as a source from the wire. */
INLINE int ipv4_martian(__be32 addr)
{
	__u32 a = bpf_ntohl(addr);

	return (a >> 24) == 0 || (a >> 24) == 127 || (a >> 28) == 0xe || a == 0xffffffff;
}

/* ::, ::1, IPv4-mapped (RFC 4291 2.5.5.2) and multicast. */
INLINE int ipv6_martian(const __be32 a[4])
{
	if (!a[0] && !a[1] && (a[2] == bpf_htonl(0xffff) || (!a[2] && (!a[3] || a[3] == bpf_htonl(1)))))
		return 1;
	return (bpf_ntohl(a[0]) >> 24) == 0xff;
}

INLINE int martian_source(const struct ip_info *ip)
{
	return ip->family == AF_INET ? ipv4_martian(ip->saddr.v4) : ipv6_martian(ip->saddr.v6);
}

/* The reverse route: towards the source, from the address it was sent to.
 * A local, broadcast or multicast route (NOT_FWDED) means the source is one
 * of ours or not a host; any other failure, or a route through another
 * interface, fails the reverse-path check. */
INLINE int reverse_path(void *ctx, const struct ip_info *ip, __u32 ingress)
{
	struct bpf_fib_lookup fib = {
		.family = ip->family,
		.l4_protocol = IPPROTO_UDP,
		.ifindex = FIB_LOOKUP_IFINDEX,
	};
	int rc;

	if (ip->family == AF_INET) {
		fib.ipv4_src = ip->daddr.v4;
		fib.ipv4_dst = ip->saddr.v4;
	} else {
		__builtin_memcpy(fib.ipv6_src, ip->daddr.v6, 16);
		__builtin_memcpy(fib.ipv6_dst, ip->saddr.v6, 16);
	}
	rc = bpf_fib_lookup(ctx, &fib, sizeof(fib), 0);
	switch (rc) {
	case BPF_FIB_LKUP_RET_SUCCESS:
	case BPF_FIB_LKUP_RET_NO_NEIGH: /* the egress interface is known by then */
		return fib.ifindex == ingress ? OUT_CONTINUE : OUT_SLOW_REVERSE_PATH;
	case BPF_FIB_LKUP_RET_NOT_FWDED:
		return OUT_SLOW_MARTIAN_SOURCE;
	}
	return OUT_SLOW_REVERSE_PATH;
}

INLINE int check_source(void *ctx, const struct ip_info *ip, __u32 ingress)
{
	if (martian_source(ip))
		return OUT_SLOW_MARTIAN_SOURCE;
	return reverse_path(ctx, ip, ingress);
}

#endif
