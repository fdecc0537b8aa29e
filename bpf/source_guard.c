// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Socket filter for the TURN server's UDP sockets (listeners and relays):
 * a datagram whose source is one of this host's addresses must come from
 * this host, through loopback. Linux drops IPv4 ones arriving elsewhere as
 * martians but delivers IPv6 ones, so without this filter a frame spoofed
 * from our own relay address would reach a hairpinned client as its peer's
 * media (and one spoofed from a local client would act as that client).
 * User space keeps host_addrs in step with the routing tables.
 */
#include "common.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define LOOPBACK_IFINDEX 1 /* lo, in every network namespace */

/* The host's addresses and prefixes (local, broadcast, anycast and
 * multicast routes), IPv4 as IPv4-mapped IPv6, longest prefix match. */
struct host_prefix {
	__u32 prefixlen; /* bits of addr that must match */
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 65536);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct host_prefix);
	__type(value, __u8);
} host_addrs SEC(".maps");

/* Datagrams dropped, per CPU (one slot). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} spoofed SEC(".maps");

INLINE int load_source(struct __sk_buff *skb, struct host_prefix *src)
{
	src->prefixlen = 128;
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		src->addr[10] = 0xff;
		src->addr[11] = 0xff;
		return bpf_skb_load_bytes_relative(skb, offsetof(struct iphdr, saddr), &src->addr[12], 4, BPF_HDR_START_NET);
	}
	if (skb->protocol == bpf_htons(ETH_P_IPV6))
		return bpf_skb_load_bytes_relative(skb, offsetof(struct ipv6hdr, saddr), src->addr, 16, BPF_HDR_START_NET);
	return -1;
}

SEC("socket")
int source_guard(struct __sk_buff *skb)
{
	struct host_prefix src = {};
	__u32 zero = 0;
	__u64 *n;

	if (skb->ingress_ifindex == LOOPBACK_IFINDEX || load_source(skb, &src))
		return skb->len;
	if (!bpf_map_lookup_elem(&host_addrs, &src))
		return skb->len;
	n = bpf_map_lookup_elem(&spoofed, &zero);
	if (n)
		(*n)++;
	return 0;
}
