// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* AF_XDP receive classifier (pkg/afxdp). UDP datagrams to a port a process
 * registered go to the AF_XDP socket of their RX queue, the Ethernet and IP
 * headers replaced by a metadata prefix (struct rx_meta: sender, arrival
 * time, pseudo-header sum) in front of the UDP header. Everything else
 * passes to the kernel untouched, and so does every datagram the kernel
 * would judge differently from a plain delivery: the program is never
 * weaker than the input path it bypasses (martian sources, reverse path,
 * checksums, destinations that are not the socket's), and what it cannot
 * hand over whole (fragments, options, oversized frames, a full ring) still
 * reaches the socket through the kernel. Each packet ends in one outcome,
 * counted overall and, once its port is known, per port.
 */
#include "common.h"
#include "csum.h"
#include "eth.h"
#include "ip.h"
#include "udp.h"
#include "source.h"
#include "xsk_rx.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* The longest frame a UMEM chunk takes (chunk size minus the kernel's
 * headroom); set by user space before loading. */
volatile const __u32 rx_frame_max = 1792;

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XSK_SLOTS);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* Frames each socket's fill ring holds for the kernel, less those taken:
 * user space adds as it refills (through mmap), the program takes one per
 * redirect and passes to the kernel at zero, so a slow reader never makes
 * the kernel drop (copy mode: a redirect without a fill frame is lost). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, XSK_SLOTS);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __s64);
} rx_credits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct rx_port_key);
	__type(value, struct rx_port);
} rx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32); /* ifindex */
	__type(value, struct rx_iface);
} rx_ifaces SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RX_OUT_MAX);
	__type(key, __u32);
	__type(value, struct rx_counter);
} rx_outcomes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, RX_PORT_SLOTS * RX_OUT_MAX);
	__type(key, __u32);
	__type(value, struct rx_counter);
} rx_port_counts SEC(".maps");

INLINE void bump(struct rx_counter *c, __u32 bytes)
{
	if (c) {
		c->packets++;
		c->bytes += bytes;
	}
}

INLINE int finish(int outcome, const struct rx_port *port, __u32 bytes)
{
	__u32 key = outcome;

	bump(bpf_map_lookup_elem(&rx_outcomes, &key), bytes);
	if (port && port->slot < RX_PORT_SLOTS) {
		key = port->slot * RX_OUT_MAX + outcome;
		bump(bpf_map_lookup_elem(&rx_port_counts, &key), bytes);
	}
	return XDP_PASS;
}

/* The UDP destination port, read before the headers are validated so that
 * traffic for other ports leaves after one lookup. */
INLINE int peek_port(void *data, void *data_end, __u16 proto, __u32 *l4_off, __u16 *port)
{
	struct udphdr *udph;

	if (proto == ETH_P_IP) {
		struct iphdr *iph = data + sizeof(struct ethhdr);

		if ((void *)(iph + 1) > data_end)
			return RX_PASS_BAD_LENGTH;
		if (iph->protocol != IPPROTO_UDP)
			return RX_PASS_NOT_UDP;
		if (iph->ihl != 5)
			return RX_PASS_IP_OPTIONS;
		if (iph->frag_off & bpf_htons(IPV4_MF_OFFSET))
			return RX_PASS_FRAGMENT;
		*l4_off = sizeof(struct ethhdr) + sizeof(struct iphdr);
	} else {
		struct ipv6hdr *ip6h = data + sizeof(struct ethhdr);

		if ((void *)(ip6h + 1) > data_end)
			return RX_PASS_BAD_LENGTH;
		if (ip6h->nexthdr == IPPROTO_FRAGMENT)
			return RX_PASS_FRAGMENT;
		if (ipv6_is_ext_header(ip6h->nexthdr))
			return RX_PASS_IPV6_EXT_HEADER;
		if (ip6h->nexthdr != IPPROTO_UDP)
			return RX_PASS_NOT_UDP;
		*l4_off = sizeof(struct ethhdr) + sizeof(struct ipv6hdr);
	}
	udph = data + *l4_off;
	if ((void *)(udph + 1) > data_end)
		return RX_PASS_BAD_LENGTH;
	*port = bpf_ntohs(udph->dest);
	return OUT_CONTINUE;
}

/* What the shared parsers say, in this program's outcomes. */
INLINE int rx_outcome_of(int out)
{
	switch (out) {
	case OUT_CONTINUE:
		return OUT_CONTINUE;
	case OUT_SLOW_BAD_IP_CHECKSUM:
		return RX_FALLBACK_BAD_IP_CHECKSUM;
	case OUT_SLOW_ZERO_UDP_CHECKSUM:
		return RX_FALLBACK_ZERO_UDP_CHECKSUM;
	case OUT_SLOW_MARTIAN_SOURCE:
		return RX_FALLBACK_MARTIAN_SOURCE;
	case OUT_SLOW_REVERSE_PATH:
		return RX_FALLBACK_REVERSE_PATH;
	}
	return RX_PASS_BAD_LENGTH;
}

INLINE int ipv4_not_unicast(__be32 a)
{
	return (bpf_ntohl(a) >> 28) == 0xe || a == 0xffffffff;
}

/* A destination no socket bound to a wildcard may take unless the kernel
 * would deliver it locally (a route of type local). */
INLINE int local_destination(struct xdp_md *ctx, const struct ip_info *ip)
{
	struct bpf_fib_lookup fib = {
		.family = ip->family,
		.l4_protocol = IPPROTO_UDP,
		.ifindex = FIB_LOOKUP_IFINDEX,
	};

	if (ip->family == AF_INET)
		fib.ipv4_dst = ip->daddr.v4;
	else
		__builtin_memcpy(fib.ipv6_dst, ip->daddr.v6, 16);
	return bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) == BPF_FIB_LKUP_RET_NOT_FWDED;
}

INLINE int same_mac(const __u8 *a, const __u8 *b)
{
	return *(const __u32 *)a == *(const __u32 *)b && *(const __u16 *)(a + 4) == *(const __u16 *)(b + 4);
}

INLINE int same_v6(const __be32 *a, const __be32 *b)
{
	return a[0] == b[0] && a[1] == b[1] && a[2] == b[2] && a[3] == b[3];
}

INLINE int bound_destination(struct xdp_md *ctx, const struct rx_port *port, const struct ip_info *ip)
{
	if (port->any)
		return local_destination(ctx, ip);
	if (ip->family == AF_INET)
		return ip->daddr.v4 == port->addr.v4;
	return same_v6(ip->daddr.v6, port->addr.v6);
}

/* Takes a fill-ring credit of the slot's socket; 0 if it has none. */
INLINE int take_credit(__u32 slot)
{
	__s64 *credit = bpf_map_lookup_elem(&rx_credits, &slot);

	if (!credit)
		return 0;
	if (__sync_fetch_and_add(credit, -1) > 0)
		return 1;
	__sync_fetch_and_add(credit, 1);
	return 0;
}

INLINE void give_credit(__u32 slot)
{
	__s64 *credit = bpf_map_lookup_elem(&rx_credits, &slot);

	if (credit)
		__sync_fetch_and_add(credit, 1);
}

/* Validates a datagram for a registered port; OUT_CONTINUE if the socket
 * may have it from here, with its interface and folded pseudo-header sum. */
INLINE int judge(struct xdp_md *ctx, const struct rx_port *port, __u16 proto, __u32 l4_off,
		 struct ip_info *ip, struct udp_info *udp, struct rx_iface **ingress, __u16 *pseudo)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 avail = data_end - data - sizeof(struct ethhdr);
	struct ethhdr *eth = data;
	struct rx_iface *iface;
	__u32 ifindex = ctx->ingress_ifindex;
	int out;

	if ((void *)(eth + 1) > data_end)
		return RX_PASS_BAD_LENGTH;
	if (eth->h_dest[0] & 1)
		return RX_PASS_NOT_UNICAST;
	iface = bpf_map_lookup_elem(&rx_ifaces, &ifindex);
	if (!iface)
		return RX_FALLBACK_NO_SOCKET;
	if (!same_mac(eth->h_dest, iface->mac))
		return RX_PASS_OTHER_HOST;

	if (proto == ETH_P_IP)
		out = ipv4_parse(data + sizeof(*eth), data_end, avail, ip);
	else
		out = ipv6_parse(data + sizeof(*eth), data_end, avail, ip);
	if ((out = rx_outcome_of(out)) != OUT_CONTINUE)
		return out;
	if (ip->family == AF_INET ? ipv4_not_unicast(ip->daddr.v4) : (bpf_ntohl(ip->daddr.v6[0]) >> 24) == 0xff)
		return RX_PASS_NOT_UNICAST;
	if (data + l4_off > data_end)
		return RX_PASS_BAD_LENGTH;
	if ((out = rx_outcome_of(udp_parse(data + l4_off, data_end, ip, udp))) != OUT_CONTINUE)
		return out;
	/* Whether a partial checksum's data is sound only the kernel knows. */
	*pseudo = udp_pseudo_fold(ip, udp);
	if (udp_maybe_partial(udp, *pseudo))
		return RX_FALLBACK_PARTIAL_CHECKSUM;
	if (!bound_destination(ctx, port, ip))
		return RX_FALLBACK_OTHER_DESTINATION;
	if ((out = rx_outcome_of(check_source(ctx, ip, ifindex))) != OUT_CONTINUE)
		return out;
	if (bpf_xdp_get_buff_len(ctx) != (__u64)(data_end - data) ||
	    sizeof(struct rx_meta) + udp->len > rx_frame_max)
		return RX_FALLBACK_OVERSIZE;
	/* Frames only from the interfaces the conn holds: their sockets live
	 * as long as it does (a datagram for its address may arrive on any). */
	if (iface->id >= 64 || !(port->ifaces & (1ULL << iface->id)))
		return RX_FALLBACK_OTHER_INTERFACE;
	if (ctx->rx_queue_index >= iface->queues)
		return RX_FALLBACK_NO_SOCKET;
	*ingress = iface;
	return OUT_CONTINUE;
}

SEC("xdp")
int xsk_rx(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 bytes = data_end - data;
	struct ip_info ip = {};
	struct udp_info udp = {};
	struct rx_port_key key = {};
	struct rx_port *port;
	struct rx_iface *iface = NULL;
	struct rx_meta *meta;
	__u32 l4_off = 0, slot, ifindex = ctx->ingress_ifindex;
	__u16 proto = 0, dport = 0, pseudo = 0;
	int out;

	out = eth_parse(data, data_end, &proto);
	if (out != OUT_CONTINUE)
		return finish(out == OUT_SLOW_VLAN ? RX_PASS_VLAN : RX_PASS_NOT_IP, NULL, bytes);
	out = peek_port(data, data_end, proto, &l4_off, &dport);
	if (out != OUT_CONTINUE)
		return finish(out, NULL, bytes);
	key.port = dport;
	key.family = proto == ETH_P_IP ? AF_INET : AF_INET6;
	port = bpf_map_lookup_elem(&rx_ports, &key);
	if (!port)
		return finish(RX_PASS_UNREGISTERED, NULL, bytes);
	out = judge(ctx, port, proto, l4_off, &ip, &udp, &iface, &pseudo);
	if (out != OUT_CONTINUE || !iface)
		return finish(out != OUT_CONTINUE ? out : RX_FALLBACK_NO_SOCKET, port, bytes);

	slot = iface->xsk_base + ctx->rx_queue_index;
	if (slot >= XSK_SLOTS || !bpf_map_lookup_elem(&xsks, &slot))
		return finish(RX_FALLBACK_NO_SOCKET, port, bytes);
	if (!take_credit(slot))
		return finish(RX_FALLBACK_RING_FULL, port, bytes);

	/* Only now is the frame changed: every check above left it whole. */
	if (bpf_xdp_adjust_head(ctx, (int)l4_off - (int)sizeof(*meta))) {
		give_credit(slot);
		return finish(RX_FALLBACK_NO_HEADROOM, port, bytes);
	}
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	meta = data;
	if ((void *)(meta + 1) > data_end) {
		/* Unreachable (the UDP header follows); the frame is no
		 * longer whole, so it must not reach the kernel either. */
		give_credit(slot);
		finish(RX_FALLBACK_NO_HEADROOM, port, bytes);
		return XDP_DROP;
	}
	meta->saddr = ip.saddr;
	meta->rx_ns = bpf_ktime_get_ns();
	meta->pseudo_sum = pseudo;
	meta->family = ip.family;
	meta->version = RX_META_VERSION;
	meta->ifindex = ifindex;
	finish(RX_REDIRECT, port, bytes);
	return bpf_redirect_map(&xsks, slot, 0);
}
