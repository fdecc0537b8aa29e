// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* The benchmark's in-kernel traffic ends (ebrtc bench --isolate), cheap
 * enough that one generator CPU can keep a relay's core saturated.
 *
 * xdp_send: run with BPF_PROG_TEST_RUN in live-frame mode on a far end's
 * veth, it sends the template frame out of that veth (XDP_TX there becomes
 * a redirect to the same device): one frame costs the generator no socket,
 * no skb and no syscall of its own. Where user space sets number_at, each
 * frame gets a number of its own there (an RTP sequence number: an SFU
 * drops a repeated one as a duplicate), its UDP checksum kept right.
 *
 * tc_sink: at TC ingress of the far ends, datagrams to the benchmark's
 * addresses (IPv4 address and port: far ends in several namespaces may
 * use the same port) are counted (merged ones by length) and dropped before any socket sees them; everything
 * else passes untouched. */
#include "common.h"
#include "eth.h"
#include "ip.h"
#include "udp.h"
#include "csum.h"
#include <linux/pkt_cls.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Frame offsets of the 16-bit big-endian number xdp_send writes and of the
 * UDP checksum over it (0: frames go out as they are), and the next number. */
__u32 number_at;
__u32 udp_csum_at;
__u32 next_number;

#define MAX_NUMBER_AT 1500

SEC("xdp")
int xdp_send(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 at = number_at, csum_at = udp_csum_at;
	__u16 *num, *csum, old, new;

	if (at == 0 || at > MAX_NUMBER_AT || csum_at > MAX_NUMBER_AT)
		return XDP_TX;
	num = data + at;
	csum = data + csum_at;
	if ((void *)(num + 1) > data_end || (void *)(csum + 1) > data_end)
		return XDP_TX;
	old = *num;
	new = bpf_htons((__u16)__sync_fetch_and_add(&next_number, 1));
	*num = new;
	if (*csum) /* RFC 1624, eqn. 3 */
		*csum = udp_csum_finish(csum_sub16((__u64)(__u16)~*csum + new, old));
	return XDP_TX;
}

/* A destination whose datagrams are counted. */
struct sink_key {
	__be32 daddr;
	__be16 dport;
	__u16 pad;
};

/* Destinations whose datagrams are counted, and the payload length of one
 * such datagram. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct sink_key);
	__type(value, __u16);
} sink_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sunk SEC(".maps");

SEC("tc")
int tc_sink(struct __sk_buff *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ip_info ip = {};
	struct udp_info udp = {};
	__u32 zero = 0, payload;
	__u16 proto, *one;
	__u64 *n;

	if (eth_parse(data, data_end, &proto) != OUT_CONTINUE || proto != ETH_P_IP)
		return TC_ACT_UNSPEC;
	if (ipv4_parse(data + ETH_HLEN, data_end, ctx->len - ETH_HLEN, &ip) != OUT_CONTINUE ||
	    udp_parse(data + ETH_HLEN + sizeof(struct iphdr), data_end, &ip, &udp) != OUT_CONTINUE)
		return TC_ACT_UNSPEC;
	struct sink_key key = {.daddr = ip.daddr.v4, .dport = udp.dport};

	one = bpf_map_lookup_elem(&sink_ports, &key);
	if (!one || !*one)
		return TC_ACT_UNSPEC;
	/* Kernel forwarding with GRO hands on merged datagrams (UDP GRO
	 * forwarding), and a veth's XDP may turn such an skb into one long
	 * datagram: count by length. */
	payload = udp.len - sizeof(struct udphdr);
	n = bpf_map_lookup_elem(&sunk, &zero);
	if (n)
		*n += payload > *one ? payload / *one : 1;
	return TC_ACT_SHOT;
}
