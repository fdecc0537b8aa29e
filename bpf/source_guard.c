// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Socket filter for the TURN server's UDP sockets (listeners and relays):
 * a datagram whose source is one of this host's addresses must come from
 * this host, through loopback. Linux drops IPv4 ones arriving elsewhere as
 * martians but delivers IPv6 ones, so without this filter a frame spoofed
 * from our own relay address would reach a hairpinned client as its peer's
 * media (and one spoofed from a local client would act as that client).
 * User space keeps host_addrs in step with the interfaces' addresses.
 */
#include "common.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define LOOPBACK_IFINDEX 1 /* lo, in every network namespace */

struct host_addr {
	union ip_addr addr; /* IPv4 in the first word, the rest zero */
	__u32 family;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct host_addr);
	__type(value, __u8);
} host_addrs SEC(".maps");

/* Datagrams dropped, per CPU (one slot). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} spoofed SEC(".maps");

INLINE int load_source(struct __sk_buff *skb, struct host_addr *src)
{
	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		src->family = AF_INET;
		return bpf_skb_load_bytes_relative(skb, offsetof(struct iphdr, saddr), &src->addr.v4, 4, BPF_HDR_START_NET);
	}
	if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		src->family = AF_INET6;
		return bpf_skb_load_bytes_relative(skb, offsetof(struct ipv6hdr, saddr), src->addr.bytes, 16, BPF_HDR_START_NET);
	}
	return -1;
}

SEC("socket")
int source_guard(struct __sk_buff *skb)
{
	struct host_addr src = {};
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
