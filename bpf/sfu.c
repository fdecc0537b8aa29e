// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* The SFU data plane (ebrtc sfu), at TC ingress of the SFU's interfaces.
 *
 * On the SFU's media ports: STUN and RTCP feedback go up to the agent's
 * socket untouched; RTP and RTCP sender reports from a joined sender are
 * replicated to the receivers of its stream: those with a route, and for
 * video only those no longer waiting for a key frame. Each replica keeps the
 * sender's RTP bytes (SSRC, sequence numbers, payload types: the receivers
 * negotiated the sender's own description) and gets fresh Ethernet, IP and
 * UDP addressing: from the SFU's address and port to the receiver's.
 *
 * Replicas go out one by one with bpf_clone_redirect in a bounded bpf_loop,
 * the last with bpf_redirect. A clone shares nothing writable with the
 * original (the helper makes the original's head private), so the next
 * receiver's rewrite starts from the previous one's headers: checksums are
 * updated by difference against what the headers hold now. Anything the
 * program cannot vouch for goes up to the stack untouched, and is counted.
 */
#define EBRTC_TC
#include "common.h"
#include "eth.h"
#include "ip.h"
#include "udp.h"
#include "hook.h"
#include "rtp.h"
#include "source.h"
#include "clock.h"
#include "skb.h"
#include "sfu.h"
#include "sfu_outcome.h"
#include "video.h"
#include "dd.h"
#include "layers.h"
#include "simulcast.h"
#include "history.h"
#include "twcc.h"
#include "audio_level.h"
#include "sfu_maps.h"
#include <linux/if_packet.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* A datagram on a media port, parsed. */
struct media {
	struct ip_info ip;
	struct udp_info udp;
	__u32 l4_off;  /* UDP header, from the frame's start */
	__u32 len;     /* UDP payload bytes */
	__u32 ip_len;  /* the IP datagram's, for the replicas' MTU checks */
	__u64 now;     /* CLOCK_MONOTONIC_COARSE, read once per packet */
	struct frame_info frame; /* when adapt */
	__u32 twcc_off; /* the transport-wide sequence number's offset in the frame; 0: none */
	__be16 twcc;   /* what it held as it arrived */
	__be16 seq;    /* RTP: the sender's sequence number */
	__u8 gate;     /* enum gate: what a waiting receiver's replica does */
	__u8 adapt;    /* video with a dependency descriptor: layers adapt per receiver */
	__u8 frame_end; /* video with the marker bit: a frame's last packet */
	__u8 padding;   /* video RTP whose payload is all padding (a probe) */
	/* A simulcast encoding's RTP packet or sender report: */
	__u8 enc;       /* which encoding */
	__u8 top;       /* the highest encoding live */
	__u8 report;    /* a sender report */
	__u16 dd_off;   /* the dependency descriptor's offset in the frame; 0: none */
	__u16 vp8_off;  /* a VP8 payload descriptor's with a picture numbering; 0: none */
	__be16 vp8_picture; /* its bytes at VP8_PICTURE_OFF as they arrived */
	__be16 vp8_tail;    /* at VP8_TAIL_OFF */
	__be32 sim_ssrc; /* the SSRC receivers get; 0: not simulcast */
	__u32 ts;       /* the RTP timestamp as it arrived */
	__be32 ssrc;    /* as it arrived */
};

/* The packet in hand, off the stack: the program's frames (main, the
 * bpf_loop callback, a replica's and its decision's) share 512 bytes. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct media);
} media_scratch SEC(".maps");

/* Receivers waiting for a key frame: audio and sender reports pass, other
 * video is held back, and a key frame's first packet lets them in. */
enum gate {
	GATE_NONE,
	GATE_HOLD,
	GATE_OPEN,
};

/* What the headers hold now: the input's, then each replica's in turn.
 * Replicas mostly share their next hop, TTL and source: what is already
 * there is not written again. */
struct addressing {
	union ip_addr saddr;
	union ip_addr daddr;
	__u8 macs[12] __attribute__((aligned(8))); /* when macs_set */
	__be16 sport;
	__be16 dport;
	__be16 seq;
	__be16 twcc;
	__be32 ts;    /* simulcast: the RTP timestamp (a report's) */
	__be32 ssrc;  /* simulcast */
	__be16 frame; /* simulcast: the dependency descriptor's frame number */
	__be16 vp8_picture; /* simulcast: the VP8 descriptor's bytes at VP8_PICTURE_OFF */
	__be16 vp8_tail;    /* and at VP8_TAIL_OFF */
	__u8 ttl;
	__u8 macs_set;
};

INLINE void count(struct sfu_stats *s, __u32 bytes, __u8 frames)
{
	if (s) {
		s->packets++;
		s->bytes += bytes;
		s->frames += frames;
	}
}

INLINE int outcome(__u32 o, __u32 bytes)
{
	count(bpf_map_lookup_elem(&outcomes, &o), bytes, 0);
	return o;
}

/* n datagrams of the same length under one outcome. */
INLINE void outcomes_add(__u32 o, __u32 n, __u32 bytes)
{
	struct sfu_stats *s = bpf_map_lookup_elem(&outcomes, &o);

	if (s) {
		s->packets += n;
		s->bytes += (__u64)n * bytes;
	}
}

/* Whether the datagram is addressed to one of the SFU's media sockets. */
INLINE int to_media_socket(const struct sfu_config *cfg, const struct media *m)
{
#pragma unroll
	for (int i = 0; i < SFU_MAX_MEDIA; i++) {
		const struct sfu_media *s = &cfg->media[i];

		if (s->port && s->port == m->udp.dport && s->family == m->ip.family &&
		    s->addr.v6[0] == m->ip.daddr.v6[0] && s->addr.v6[1] == m->ip.daddr.v6[1] &&
		    s->addr.v6[2] == m->ip.daddr.v6[2] && s->addr.v6[3] == m->ip.daddr.v6[3])
			return 1;
	}
	return 0;
}

#define HEADERS (ETH_HLEN + sizeof(struct ipv6hdr) + sizeof(struct udphdr))

/* Ethernet, IP and UDP to one of our media sockets, the headers linear.
 * A frame seen only because the interface is promiscuous is another
 * host's: the kernel drops it, and so must we. */
INLINE int parse_media(struct __sk_buff *skb, struct media *m)
{
	__u32 want = skb->len < HEADERS ? skb->len : HEADERS;
	struct sfu_config *cfg;
	__u32 zero = 0;
	void *data, *data_end;
	__u16 proto;

	if (skb->pkt_type == PACKET_OTHERHOST)
		return -1;
	if ((long)skb->data_end - (long)skb->data < want && bpf_skb_pull_data(skb, want))
		return -1;
	data = (void *)(long)skb->data;
	data_end = (void *)(long)skb->data_end;
	if (eth_parse(data, data_end, &proto) != OUT_CONTINUE)
		return -1;
	if (proto == ETH_P_IP) {
		if (ipv4_parse(data + ETH_HLEN, data_end, skb->len - ETH_HLEN, &m->ip) != OUT_CONTINUE)
			return -1;
		m->l4_off = ETH_HLEN + sizeof(struct iphdr);
	} else {
		if (ipv6_parse(data + ETH_HLEN, data_end, skb->len - ETH_HLEN, &m->ip) != OUT_CONTINUE)
			return -1;
		m->l4_off = ETH_HLEN + sizeof(struct ipv6hdr);
	}
	if (udp_parse(data + m->l4_off, data_end, &m->ip, &m->udp) != OUT_CONTINUE)
		return -1;
	cfg = bpf_map_lookup_elem(&config, &zero);
	if (!cfg || !to_media_socket(cfg, m))
		return -1;
	m->len = m->udp.len - sizeof(struct udphdr);
	m->ip_len = m->l4_off - ETH_HLEN + m->udp.len;
	return 0;
}

INLINE struct sender *lookup_sender(const struct media *m, __be32 ssrc)
{
	if (m->ip.family == AF_INET) {
		struct sender_key_v4 k = { .addr = m->ip.saddr.v4, .ssrc = ssrc, .port = m->udp.sport };

		return LOOKUP_AT(&senders_v4, &k, "senders_v4");
	}
	struct sender_key_v6 k = { .ssrc = ssrc, .port = m->udp.sport };

	__builtin_memcpy(k.addr, m->ip.saddr.v6, 16);
	return LOOKUP_AT(&senders_v6, &k, "senders_v6");
}

/* The kernel's input checks on the source (source.h), which the stack
 * this program bypasses would apply: a spoofed joined sender is left to
 * it. A passing verdict is kept in the sender's entry for a second, for
 * this ingress interface only. */
INLINE int source_admitted(struct __sk_buff *skb, const struct media *m, struct sender *s)
{
	__u32 ingress = skb->ingress_ifindex;
	__u64 now = m->now;

	if (s->src_ifindex == ingress && s->src_until > now)
		return 1;
	if (check_source(skb, &m->ip, ingress) != OUT_CONTINUE)
		return 0;
	s->src_ifindex = ingress;
	s->src_until = now + SOURCE_TTL_NS;
	return 1;
}

/* Offsets of the fields a replica changes. */
#define IP4_TTL_OFF (ETH_HLEN + offsetof(struct iphdr, ttl))
#define IP4_CSUM_OFF (ETH_HLEN + offsetof(struct iphdr, check))
#define IP4_ADDRS_OFF (ETH_HLEN + offsetof(struct iphdr, saddr))
#define IP6_HOPS_OFF (ETH_HLEN + offsetof(struct ipv6hdr, hop_limit))
#define IP6_ADDRS_OFF (ETH_HLEN + offsetof(struct ipv6hdr, saddr))

/* Where replica r leaves: its cached path while fresh and long enough,
 * else the kernel's answer (from the loopback interface, as the TURN fast
 * path asks), cached. NULL: no route, no neighbour, or too long for the
 * MTU; the replica is not sent (the kernel resolves the neighbour when the
 * agent answers the receiver's connectivity checks). */
INLINE struct replica_path *replica_path(struct __sk_buff *skb, const struct replica *r, __u32 ip_len,
					  __u64 now)
{
	struct bpf_fib_lookup *fib;
	struct replica_path *p;
	__u32 slot = r->slot, zero = 0;

	p = bpf_map_lookup_elem(&replica_paths, &slot);
	if (!p)
		return NULL;
	if (p->expires > now && ip_len <= p->max_len)
		return p;
	fib = (struct bpf_fib_lookup *)bpf_map_lookup_elem(&fib_scratch, &zero);
	if (!fib)
		return NULL;
	__builtin_memset(fib, 0, sizeof(*fib));
	fib->family = r->family;
	fib->l4_protocol = IPPROTO_UDP;
	fib->sport = r->sport;
	fib->dport = r->dport;
	fib->tot_len = ip_len;
	fib->ifindex = FIB_LOOKUP_IFINDEX;
	if (r->family == AF_INET) {
		fib->ipv4_src = r->saddr.v4;
		fib->ipv4_dst = r->daddr.v4;
	} else {
		__builtin_memcpy(fib->ipv6_src, r->saddr.v6, 16);
		__builtin_memcpy(fib->ipv6_dst, r->daddr.v6, 16);
	}
	if (bpf_fib_lookup(skb, fib, sizeof(*fib), 0) != BPF_FIB_LKUP_RET_SUCCESS) {
		p->expires = 0;
		return NULL;
	}
	p->expires = now + REPLICA_PATH_TTL_NS;
	p->ifindex = fib->ifindex;
	p->max_len = ip_len;
	__builtin_memcpy(p->macs, fib->dmac, ETH_ALEN);
	__builtin_memcpy(p->macs + ETH_ALEN, fib->smac, ETH_ALEN);
	return p;
}

INLINE int same_macs(const __u8 *a, const __u8 *b)
{
	return *(const __u64 *)a == *(const __u64 *)b && *(const __u32 *)(a + 8) == *(const __u32 *)(b + 8);
}

/* One IPv4 address at off, and both checksums over it (the UDP one as
 * pseudo-header). */
INLINE int ipv4_replace_addr(struct __sk_buff *skb, __u32 off, __be32 from, __be32 to, __u32 udp_csum, __u64 udp_flags)
{
	return bpf_skb_store_bytes(skb, off, &to, sizeof(to), 0) ||
	       bpf_l3_csum_replace(skb, IP4_CSUM_OFF, from, to, sizeof(to)) ||
	       bpf_l4_csum_replace(skb, udp_csum, from, to, udp_flags | BPF_F_PSEUDO_HDR | sizeof(to));
}

/* The IPv4 addresses that differ from what the headers hold: after the
 * first replica, only the destination (the SFU's address is the source
 * of every replica). */
INLINE int ipv4_readdress(struct __sk_buff *skb, struct addressing *cur, const struct replica *r, __u32 udp_csum,
			  __u64 udp_flags)
{
	if (cur->saddr.v4 != r->saddr.v4 &&
	    ipv4_replace_addr(skb, IP4_ADDRS_OFF, cur->saddr.v4, r->saddr.v4, udp_csum, udp_flags))
		return -1;
	if (cur->daddr.v4 != r->daddr.v4 &&
	    ipv4_replace_addr(skb, IP4_ADDRS_OFF + 4, cur->daddr.v4, r->daddr.v4, udp_csum, udp_flags))
		return -1;
	cur->saddr.v4 = r->saddr.v4;
	cur->daddr.v4 = r->daddr.v4;
	return 0;
}

/* Readdress the packet from cur to replica r; cur becomes r's. Checksums
 * change by difference (bpf_l3/l4_csum_replace), which also keeps a partial
 * UDP checksum partial: only its pseudo-header part moves. */
INLINE int readdress(struct __sk_buff *skb, const struct media *m, struct addressing *cur,
		     const struct replica *r, const struct replica_path *path)
{
	__u32 udp_csum = m->l4_off + offsetof(struct udphdr, check);
	__u32 ports_old = (__u32)cur->sport | (__u32)cur->dport << 16;
	__u32 ports_new = (__u32)r->sport | (__u32)r->dport << 16;
	__u64 udp_flags = BPF_F_MARK_MANGLED_0; /* a zero IPv4 checksum stays zero */
	__s64 diff;

	if (!cur->macs_set || !same_macs(cur->macs, path->macs)) {
		if (bpf_skb_store_bytes(skb, 0, path->macs, sizeof(path->macs), 0))
			return -1;
		__builtin_memcpy(cur->macs, path->macs, sizeof(cur->macs));
		cur->macs_set = 1;
	}
	if (m->ip.family == AF_INET) {
		if (ipv4_readdress(skb, cur, r, udp_csum, udp_flags))
			return -1;
		if (cur->ttl != r->ttl &&
		    (bpf_skb_store_bytes(skb, IP4_TTL_OFF, &r->ttl, 1, 0) ||
		     bpf_l3_csum_replace(skb, IP4_CSUM_OFF, bpf_htons((__u16)cur->ttl << 8 | IPPROTO_UDP),
					 bpf_htons((__u16)r->ttl << 8 | IPPROTO_UDP), 2)))
			return -1;
	} else {
		diff = bpf_csum_diff((__be32 *)cur, 32, (__be32 *)r, 32, 0);
		if (diff < 0 || bpf_skb_store_bytes(skb, IP6_ADDRS_OFF, r, 32, 0) ||
		    bpf_l4_csum_replace(skb, udp_csum, 0, diff, udp_flags | BPF_F_PSEUDO_HDR))
			return -1;
		if (cur->ttl != r->ttl && bpf_skb_store_bytes(skb, IP6_HOPS_OFF, &r->ttl, 1, 0))
			return -1;
		__builtin_memcpy(cur, r, 32);
	}
	if (ports_old != ports_new &&
	    (bpf_skb_store_bytes(skb, m->l4_off, &ports_new, 4, 0) ||
	     bpf_l4_csum_replace(skb, udp_csum, ports_old, ports_new, udp_flags | sizeof(__u32))))
		return -1;
	cur->sport = r->sport;
	cur->dport = r->dport;
	cur->ttl = r->ttl;
	return 0;
}

/* What r's gate does with this packet. A gate opens only once the key
 * frame's first packet has gone out to it (gate_open), not when a route or
 * the clone fails: else the receiver would wait for nothing but deltas. */
enum gate_verdict {
	GATE_PASSES,
	GATE_HELD,
	GATE_OPENS,
};

INLINE enum gate_verdict gate_of(const struct replica *r, __u8 gate)
{
	__u32 slot = r->slot;
	__u32 *waiting;

	if (gate == GATE_NONE)
		return GATE_PASSES;
	waiting = bpf_map_lookup_elem(&replica_gates, &slot);
	if (!waiting || !*waiting)
		return GATE_PASSES;
	return gate == GATE_HOLD ? GATE_HELD : GATE_OPENS;
}

INLINE void gate_open(const struct replica *r)
{
	__u32 slot = r->slot;
	__u32 *waiting = bpf_map_lookup_elem(&replica_gates, &slot);

	if (waiting)
		*waiting = 0;
}

struct fan {
	struct __sk_buff *skb;
	struct fanout *f;
	struct media *m;
	struct addressing *cur;
	__u32 n;      /* replicas to clone: all but the last */
	__u32 sent;   /* of them, cloned out (one outcome count per packet) */
	int failed;   /* a rewrite failed: stop, drop */
};

INLINE void count_replica(const struct replica *r, const struct media *m)
{
	__u32 slot = r->slot;

	count(bpf_map_lookup_elem(&replica_stats, &slot), m->len, m->frame_end);
}

/* A late packet of a layer the receiver does not get fills the gap kept
 * for it as padding: user space sends that (one packet cannot be cut
 * down for one replica and stay whole for the next). */
INLINE __u32 padding_upcall(struct __sk_buff *skb, const struct media *m, const struct replica *r, __u16 number,
			    const struct sim_numbers *n)
{
	struct video_event *ev = bpf_ringbuf_reserve(&video_events, sizeof(*ev), 0);

	if (!ev)
		return SFU_EVENT_LOST;
	ev->kind = VIDEO_EVENT_PADDING;
	ev->sender = 0;
	ev->r = *r;
	ev->number = number;
	ev->len = 0;
	if (bpf_skb_load_bytes(skb, m->l4_off + sizeof(struct udphdr), ev->rtp, sizeof(ev->rtp))) {
		bpf_ringbuf_discard(ev, 0);
		return SFU_EVENT_LOST;
	}
	if (m->sim_ssrc) { /* under the receiver's SSRC and timestamp */
		__be32 ts = bpf_htonl(n->ts);

		__builtin_memcpy(&ev->rtp[4], &ts, sizeof(ts));
		__builtin_memcpy(&ev->rtp[8], &m->sim_ssrc, sizeof(m->sim_ssrc));
	}
	bpf_ringbuf_submit(ev, 0);
	return SFU_PADDING_UPCALL;
}

/* One replica's layer decision, verified once on its own (a global
 * function): inlined, every path into it would be walked through it.
 * Returns enum layer_verdict, and the number above bit 8. */
__attribute__((noinline)) int replica_layers_step(struct replica_layers *l, const struct frame_info *f, __u32 target,
						  __u64 now)
{
	enum layer_verdict v;
	__u16 number = 0;

	if (!l || !f)
		return LAYER_AS_IS;
	v = layers_decide(l, f, target > LAYERS_ALL ? LAYERS_ALL : target, now, &number);
	return (int)number << 8 | v;
}

/* What r's decode target and renumbering make of this packet. */
INLINE enum layer_verdict adapt(const struct replica *r, const struct media *m, __u16 *number)
{
	__u32 slot = r->slot;
	__u32 *target = bpf_map_lookup_elem(&replica_targets, &slot);
	struct replica_layers *l = bpf_map_lookup_elem(&replica_adapt, &slot);
	int step;

	if (!target || !l)
		return LAYER_AS_IS;
	/* Only this program moves current off LAYERS_ALL and started off zero:
	 * a receiver never adapted stays on the sender's numbers unclaimed. */
	if (*target >= LAYERS_ALL && l->current == LAYERS_ALL && !l->rw.started)
		return LAYER_AS_IS;
	if (!layers_claim(l))
		return LAYER_BUSY;
	step = replica_layers_step(l, &m->frame, *target, m->now);
	layers_release(l);
	*number = step >> 8;
	return step & 0xff;
}

/* One simulcast receiver's decision (simulcast.h), verified once on its
 * own as replica_layers_step is. */
__attribute__((noinline)) int replica_encoding_step(struct replica_layers *l, const struct media *m, __u32 target,
						    struct sim_numbers *n)
{
	if (!l || !m || !n)
		return LAYER_OTHER;
	return sim_decide(l, &m->frame, m->enc, m->ts, target > LAYERS_ALL ? LAYERS_ALL : target, m->top, m->now, n);
}

/* What r's encoding and layers make of a simulcast packet, and its
 * numbers (a sender report's: its timestamp, if r takes its encoding). */
INLINE enum layer_verdict adapt_encoding(const struct replica *r, const struct media *m, struct sim_numbers *n)
{
	__u32 slot = r->slot;
	__u32 *target = bpf_map_lookup_elem(&replica_targets, &slot);
	struct replica_layers *l = bpf_map_lookup_elem(&replica_adapt, &slot);
	enum layer_verdict v = LAYER_OTHER;

	if (!target || !l)
		return LAYER_OTHER;
	if (!layers_claim(l))
		return LAYER_BUSY;
	if (!m->report) {
		v = replica_encoding_step(l, m, *target, n);
	} else if (l->sim.encoding == m->enc) {
		n->ts = m->ts + l->sim.shift.ts;
		v = LAYER_SEND;
	}
	layers_release(l);
	return v;
}

/* A 32-bit field of the UDP payload at off (even), by difference in the
 * UDP checksum; *now is what it holds. */
INLINE int rewrite_word(struct __sk_buff *skb, const struct media *m, __u32 off, __be32 *now, __be32 to)
{
	__u32 at = m->l4_off + sizeof(struct udphdr) + off;

	if (*now == to)
		return 0;
	if (bpf_skb_store_bytes(skb, at, &to, sizeof(to), 0) ||
	    bpf_l4_csum_replace(skb, m->l4_off + offsetof(struct udphdr, check), *now, to,
				BPF_F_MARK_MANGLED_0 | sizeof(to)))
		return -1;
	*now = to;
	return 0;
}

/* Where a sender report holds its sender's SSRC and RTP timestamp. */
#define SR_SSRC_OFF 4
#define SR_TS_OFF 16

/* A 16-bit field of the frame at at, by difference in the UDP checksum
 * (at either parity); *now is what it holds. */
INLINE int rewrite_half(struct __sk_buff *skb, const struct media *m, __u32 at, __be16 *now, __be16 to)
{
	int odd = (at - m->l4_off) & 1;

	if (*now == to)
		return 0;
	if (bpf_skb_store_bytes(skb, at, &to, sizeof(to), 0) ||
	    bpf_l4_csum_replace(skb, m->l4_off + offsetof(struct udphdr, check), twcc_csum_word(*now, odd),
				twcc_csum_word(to, odd), BPF_F_MARK_MANGLED_0 | sizeof(to)))
		return -1;
	*now = to;
	return 0;
}

/* A simulcast replica's SSRC, timestamp, frame number and VP8 picture
 * numbering (its sequence number: renumber). */
INLINE int sim_rewrite(struct __sk_buff *skb, const struct media *m, struct addressing *cur, const struct sim_numbers *n)
{
	__u32 ssrc_at = m->report ? SR_SSRC_OFF : offsetof(struct rtp_fixed, ssrc);
	__u32 ts_at = m->report ? SR_TS_OFF : offsetof(struct rtp_fixed, ts);

	if (rewrite_word(skb, m, ssrc_at, &cur->ssrc, m->sim_ssrc) || rewrite_word(skb, m, ts_at, &cur->ts, bpf_htonl(n->ts)))
		return -1;
	if (m->dd_off && rewrite_half(skb, m, m->dd_off + 1, &cur->frame, bpf_htons(n->frame)))
		return -1;
	if (!m->vp8_off || !(n->vp8.fields & VP8_PICTURE))
		return 0;
	if (rewrite_half(skb, m, m->vp8_off + VP8_PICTURE_OFF, &cur->vp8_picture, bpf_htons(0x8000 | n->vp8.picture)) ||
	    rewrite_half(skb, m, m->vp8_off + VP8_TAIL_OFF, &cur->vp8_tail, vp8_tail(cur->vp8_tail, &n->vp8)))
		return -1;
	return 0;
}

/* The RTP sequence number r is sent, by difference in the UDP checksum. */
INLINE int renumber(struct __sk_buff *skb, const struct media *m, struct addressing *cur, __u16 number)
{
	return rewrite_half(skb, m, m->l4_off + sizeof(struct udphdr) + offsetof(struct rtp_fixed, seq), &cur->seq,
			    bpf_htons(number));
}

/* The leg's own transport-wide sequence number in r's replica (twcc.h),
 * by difference in the UDP checksum. A leg without one keeps what the
 * headers hold: its receiver did not negotiate the extension and ignores
 * it. */
INLINE int twcc_stamp(struct __sk_buff *skb, const struct media *m, struct addressing *cur, const struct replica *r)
{
	__u16 seq;

	if (!m->twcc_off || twcc_next(r->twcc, m->len, &seq))
		return 0;
	return rewrite_half(skb, m, m->twcc_off, &cur->twcc, bpf_htons(seq));
}

/* ready_replica's answer: what became of the replica, its gate's verdict
 * and, ready, the interface it leaves by. */
#define READY_OUTCOME(v) ((__u32)((v) & 0xff))
#define READY_GATE(v) ((enum gate_verdict)(((v) >> 8) & 0xff))
#define READY_IFINDEX(v) ((__u32)((v) >> 32))

INLINE __u64 ready(__u32 o, enum gate_verdict gate, __u32 ifindex)
{
	return (__u64)ifindex << 32 | (__u32)gate << 8 | o;
}

/* Everything before replica r leaves: its gate, its layer and number, its
 * path, its headers. SFU_REPLICA when it is ready to go out; else what
 * became of it (SFU_REWRITE_FAILED: the packet is lost). A global
 * function: verified once, not once per caller and path into it. */
__attribute__((noinline)) __u64 ready_replica(struct __sk_buff *skb, struct media *m, struct addressing *cur,
					      const struct replica *r)
{
	const struct replica_path *path;
	struct sim_numbers n = {};
	enum gate_verdict gate;
	__u16 number;

	if (!skb || !m || !cur || !r)
		return ready(SFU_REWRITE_FAILED, GATE_PASSES, 0);
	number = bpf_ntohs(m->seq);
	if (r->family != m->ip.family)
		return ready(SFU_FAMILY_MISMATCH, GATE_PASSES, 0);
	gate = gate_of(r, m->gate);
	if (gate == GATE_HELD)
		return ready(SFU_GATED, gate, 0);
	if (m->sim_ssrc || m->adapt) {
		switch (m->sim_ssrc ? adapt_encoding(r, m, &n) : adapt(r, m, &number)) {
		case LAYER_DROP:
			return ready(SFU_LAYER_DROPPED, gate, 0);
		case LAYER_BUSY:
			return ready(SFU_LAYER_BUSY, gate, 0);
		case LAYER_OTHER:
			return ready(SFU_OTHER_ENCODING, gate, 0);
		case LAYER_PADDING:
			return ready(padding_upcall(skb, m, r, m->sim_ssrc ? n.seq : number, &n), gate, 0);
		default:
			break;
		}
		if (m->sim_ssrc)
			number = n.seq;
	}
	path = replica_path(skb, r, m->ip_len, m->now);
	if (!path)
		return ready(SFU_NO_ROUTE, gate, 0);
	if (readdress(skb, m, cur, r, path) || (m->adapt && renumber(skb, m, cur, number)) ||
	    (m->sim_ssrc && sim_rewrite(skb, m, cur, &n)) || twcc_stamp(skb, m, cur, r))
		return ready(SFU_REWRITE_FAILED, gate, 0);
	return ready(SFU_REPLICA, gate, path->ifindex);
}

/* A replica has gone: its gate opens if this packet opens gates. */
INLINE void replica_sent(const struct replica *r, enum gate_verdict gate, const struct media *m)
{
	if (gate == GATE_OPENS)
		gate_open(r);
	count_replica(r, m);
}

/* One replica of all but the last: made ready, cloned out. */
static long clone_one(__u64 i, struct fan *c)
{
	const struct replica *r;
	__u64 v;
	__u32 o;

	if (i >= c->n)
		return 1;
	r = &c->f->r[i & (SFU_MAX_FANOUT - 1)];
	v = ready_replica(c->skb, c->m, c->cur, r);
	o = READY_OUTCOME(v);
	if (o == SFU_REWRITE_FAILED) {
		c->failed = 1;
		return 1;
	}
	if (o != SFU_REPLICA) {
		outcome(o, c->m->len);
		return 0;
	}
	if (bpf_clone_redirect(c->skb, READY_IFINDEX(v), 0)) {
		outcome(SFU_CLONE_FAILED, c->m->len);
		return 0;
	}
	replica_sent(r, READY_GATE(v), c->m);
	c->sent++;
	return 0;
}

/* A COMPLETE checksum (the device's sum over the received bytes) would not
 * hold for any replica: growing the tail and trimming it back leaves the
 * skb without one, so receivers verify the UDP checksum, which we keep. */
INLINE int drop_complete_sum(struct __sk_buff *skb)
{
	if (bpf_skb_change_tail(skb, skb->len + 1, 0))
		return -1;
	return bpf_skb_change_tail(skb, skb->len - 1, 0) ? -2 : 0;
}

/* Replicate to the sender's receivers; the last leaves by bpf_redirect. */
INLINE int replicate(struct __sk_buff *skb, struct media *m, const struct sender *s)
{
	struct addressing cur = { .saddr = m->ip.saddr, .daddr = m->ip.daddr, .sport = m->udp.sport,
				  .dport = m->udp.dport, .seq = m->seq, .twcc = m->twcc, .ts = bpf_htonl(m->ts),
				  .ssrc = m->ssrc, .frame = bpf_htons(m->frame.p.frame),
				  .vp8_picture = m->vp8_picture, .vp8_tail = m->vp8_tail };
	struct fan c = { .skb = skb, .m = m, .cur = &cur };
	const struct replica *last;
	__u32 id = s->id, slot = s->slot, o;
	__u64 v;
	__u8 ttl, summed;
	int rc = 0;

	c.f = bpf_map_lookup_elem(&fanouts, &id);
	if (!c.f || c.f->count == 0 || c.f->count > SFU_MAX_FANOUT) {
		outcome(SFU_NO_RECEIVERS, m->len);
		return TC_ACT_SHOT;
	}
	if (bpf_skb_load_bytes(skb, m->ip.family == AF_INET ? IP4_TTL_OFF : IP6_HOPS_OFF, &ttl, 1))
		return TC_ACT_UNSPEC;
	cur.ttl = ttl;
	summed = skb_ip_summed(skb);
	if (summed == CHECKSUM_PARTIAL && !skb_partial_is_udp(skb, m->l4_off)) {
		outcome(SFU_MALFORMED, m->len);
		return TC_ACT_UNSPEC;
	}
	if (summed == CHECKSUM_COMPLETE)
		rc = drop_complete_sum(skb);
	if (rc == -1)
		return outcome(SFU_MALFORMED, m->len), TC_ACT_UNSPEC;
	if (rc < 0)
		return outcome(SFU_REWRITE_FAILED, m->len), TC_ACT_SHOT;
	count(bpf_map_lookup_elem(&sender_stats, &slot), m->len, m->frame_end);
	c.n = c.f->count - 1;
	bpf_loop(c.n, clone_one, &c, 0);
	outcomes_add(SFU_REPLICA, c.sent, m->len);
	if (c.failed)
		return outcome(SFU_REWRITE_FAILED, m->len), TC_ACT_SHOT;
	/* Every receiver has been dealt with but the last: the packet counts
	 * as replicated whatever becomes of the last one. */
	outcome(SFU_REPLICATED, m->len);
	last = &c.f->r[c.n & (SFU_MAX_FANOUT - 1)];
	v = ready_replica(skb, m, &cur, last);
	o = READY_OUTCOME(v);
	if (o != SFU_REPLICA)
		return outcome(o, m->len), TC_ACT_SHOT;
	replica_sent(last, READY_GATE(v), m);
	outcome(SFU_REPLICA, m->len);
	return bpf_redirect(READY_IFINDEX(v), 0);
}

/* A sender attached a template structure: user space parses it and
 * installs the templates (sender_templates). */
INLINE void structure_upcall(struct __sk_buff *skb, const struct media *m, const struct sender *s,
			     const struct rtp_ext *e)
{
	struct video_event *ev = bpf_ringbuf_reserve(&video_events, sizeof(*ev), 0);
	__u32 len = e->len;

	if (!ev) {
		outcome(SFU_EVENT_LOST, m->len);
		return;
	}
	__builtin_memset(&ev->r, 0, sizeof(ev->r));
	ev->kind = VIDEO_EVENT_STRUCTURE;
	ev->sender = s->slot;
	ev->number = 0;
	ev->len = len;
	if (len == 0 || len > DD_MAX_LEN || bpf_skb_load_bytes(skb, e->off, ev->dd, len) ||
	    bpf_skb_load_bytes(skb, m->l4_off + sizeof(struct udphdr), ev->rtp, sizeof(ev->rtp))) {
		bpf_ringbuf_discard(ev, 0);
		outcome(SFU_EVENT_LOST, m->len);
		return;
	}
	bpf_ringbuf_submit(ev, 0);
}

/* A frame's DTIs: its template's; for the packet attaching a structure
 * (a key frame's first), a switch point of every target of that
 * structure, judged by its own decode target count: the ids of the new
 * structure are not installed yet, and the table in force may have more
 * targets than the new one (a receiver above the new count must move down
 * at this start, or the rest of the key frame finds it out of range). */
#define DTIS_ALL_SWITCH 0xaaaa

/* An RTP packet whose payload is all padding (a probe). */
INLINE int padding_only(struct __sk_buff *skb, const struct media *m, const struct rtp_fixed *h, int hdr)
{
	__u8 pad;

	return (h->vpxcc & 0x20) && m->len > (__u32)hdr &&
	       !bpf_skb_load_bytes(skb, m->l4_off + sizeof(struct udphdr) + m->len - 1, &pad, 1) &&
	       pad == m->len - (__u32)hdr;
}

/* The packet's frame, for senders whose layers adapt: its descriptor's
 * fields and its template's DTIs (unknown: everyone gets it); its bytes
 * counted to its layer. Padding-only packets have no frame. */
INLINE void video_frame(struct __sk_buff *skb, struct media *m, const struct sender *s, const struct rtp_fixed *h,
			int hdr)
{
	__u32 payload = m->l4_off + sizeof(struct udphdr), slot = s->slot, key, t;
	struct frame_info *f = &m->frame;
	struct layer_templates *tbl;
	struct dd_fields d;
	struct rtp_ext e;

	m->adapt = 1;
	f->p.seq = bpf_ntohs(h->seq);
	if (m->padding) {
		f->p.flags = LAST_PADDING;
		return;
	}
	if (rtp_ext_find(skb, payload, h->vpxcc, hdr, s->dd_ext, &e) || dd_read(skb, &e, &d))
		return;
	m->dd_off = e.off;
	f->p.frame = d.frame;
	f->p.flags = (d.flags & DD_START ? LAST_START : 0) | (d.flags & DD_END ? LAST_END : 0);
	if (d.flags & DD_STRUCTURE)
		structure_upcall(skb, m, s, &e);
	if (d.flags & DD_STRUCTURE) {
		if (!d.targets || d.targets > LAYERS_MAX_TARGETS)
			return;
		t = TEMPLATE_KNOWN | DTIS_ALL_SWITCH;
		f->targets = d.targets;
	} else {
		tbl = bpf_map_lookup_elem(&sender_templates, &slot);
		if (!tbl || !tbl->targets || tbl->targets > LAYERS_MAX_TARGETS)
			return;
		t = tbl->t[d.template_id & 63];
		if (!(t & TEMPLATE_KNOWN) || (d.flags & DD_CUSTOM_DTIS))
			return;
		f->targets = tbl->targets;
	}
	f->dtis = TEMPLATE_DTIS(t);
	f->flags = FRAME_KNOWN;
	key = slot * LAYERS_MAX_TARGETS + TEMPLATE_LAYER(t);
	count(bpf_map_lookup_elem(&layer_bytes, &key), m->len, 0);
}

/* What receivers' decisions need of a simulcast encoding's RTP packet
 * (after video_frame and the gate): its encoding, timestamp and the
 * highest encoding live, which media (not padding) keeps live. One
 * without a dependency descriptor (Firefox's VP8) is a frame of its own
 * per packet, its encoding one target, all of it. */
INLINE void simulcast_packet(struct media *m, const struct sender *s)
{
	__u32 id = s->id, key = s->slot * LAYERS_MAX_TARGETS;
	struct sim_encodings *e = bpf_map_lookup_elem(&simulcast_encodings, &id);
	struct frame_info *f = &m->frame;
	__u8 enc = m->enc & (SIM_MAX_ENCODINGS - 1); /* (bounded again: read back from a map) */
	int padding = m->padding, key_start = m->gate == GATE_OPEN;

	if (padding)
		m->dd_off = 0; /* a probe's descriptor, if any, says nothing: left as is */
	if (e && !padding) {
		e->last_at[enc] = m->now;
		e->no_dd[enc] = !m->dd_off;
	}
	m->top = e ? sim_top(e, m->now) : 0;
	if (m->adapt && (m->dd_off || padding)) /* video_frame's frame stands */
		return;
	m->adapt = 1;
	__builtin_memset(f, 0, sizeof(*f));
	f->p.seq = bpf_ntohs(m->seq);
	if (padding) { /* (a padding packet of an encoding without descriptors) */
		f->p.flags = LAST_PADDING;
		return;
	}
	count(bpf_map_lookup_elem(&layer_bytes, &key), m->len, 0);
	f->p.flags = (key_start ? LAST_START : 0) | (m->frame_end ? LAST_END : 0);
	f->flags = key_start ? FRAME_KEY : 0;
}

/* A simulcast encoding's VP8 payload descriptor (after simulcast_packet):
 * its picture numbering, where it is and its bytes as they arrived. peek
 * holds the payload's first VIDEO_PEEK bytes where it has that many
 * (video_gate read them); a shorter payload's descriptor is read here. */
INLINE void vp8_read(struct __sk_buff *skb, struct media *m, int hdr, const __u8 peek[VIDEO_PEEK])
{
	__u32 off = m->l4_off + sizeof(struct udphdr) + hdr, have;
	__u8 d[VP8_DESCRIPTOR] = {};

	if (hdr < 0 || (__u32)hdr > m->len || m->len - (__u32)hdr < VP8_HEAD)
		return;
	have = m->len - (__u32)hdr;
	if (have >= VIDEO_PEEK) { /* (copied, not pointed at: one buffer for the verifier) */
		__builtin_memcpy(d, peek, VP8_DESCRIPTOR);
		have = VP8_DESCRIPTOR;
	} else {
		have = have >= VP8_DESCRIPTOR ? VP8_DESCRIPTOR : VP8_HEAD;
		if (have == VP8_DESCRIPTOR ? bpf_skb_load_bytes(skb, off, d, VP8_DESCRIPTOR) : bpf_skb_load_bytes(skb, off, d, VP8_HEAD))
			return;
	}
	vp8_pictures_of(d, have, &m->frame.vp8);
	if (!(m->frame.vp8.fields & VP8_PICTURE))
		return;
	m->vp8_off = off;
	__builtin_memcpy(&m->vp8_picture, d + VP8_PICTURE_OFF, 2);
	__builtin_memcpy(&m->vp8_tail, d + VP8_TAIL_OFF, 2);
}

/* A simulcast encoding's sender report: only its receivers get it, under
 * their SSRC and timestamps. -1: too short to hold its RTP timestamp. */
INLINE int sim_report(struct __sk_buff *skb, struct media *m, const struct sender *s)
{
	__be32 ts;

	if (m->len < SR_TS_OFF + sizeof(ts) ||
	    bpf_skb_load_bytes(skb, m->l4_off + sizeof(struct udphdr) + SR_TS_OFF, &ts, sizeof(ts)))
		return -1;
	m->ts = bpf_ntohl(ts);
	m->report = 1;
	return 0;
}

/* Where the sender's transport-wide sequence number is (twcc.h), which
 * each leg's replica rewrites; not found or not two bytes: left as is
 * (-1). */
INLINE int twcc_find(struct __sk_buff *skb, struct media *m, __u8 vpxcc, int hdr, __u8 id)
{
	struct rtp_ext e;

	if (rtp_ext_find(skb, m->l4_off + sizeof(struct udphdr), vpxcc, hdr, id, &e) || e.len != TWCC_LEN ||
	    bpf_skb_load_bytes(skb, e.off, &m->twcc, sizeof(m->twcc)))
		return -1;
	m->twcc_off = e.off;
	return 0;
}

/* An audio packet's level, counted to its sender's (speakers). */
INLINE void audio_level_count(struct __sk_buff *skb, const struct media *m, const struct sender *s, __u8 vpxcc, int hdr)
{
	__u32 slot = s->slot;
	__u8 b;

	if (!audio_level_read(skb, m->l4_off + sizeof(struct udphdr), vpxcc, hdr, s->level_ext, &b))
		audio_level_add(bpf_map_lookup_elem(&audio_levels, &slot), b);
}

/* What an RTP packet of this codec does to waiting receivers: a key
 * frame's first packet opens their gates; any other video is held. */
INLINE __u8 video_gate(struct __sk_buff *skb, const struct media *m, __u8 codec, int hdr,
			    __u8 peek[VIDEO_PEEK])
{
	if (codec == VIDEO_NONE)
		return GATE_NONE;
	if ((__u32)hdr > m->len || m->len - (__u32)hdr < VIDEO_PEEK ||
	    bpf_skb_load_bytes(skb, m->l4_off + sizeof(struct udphdr) + hdr, peek, VIDEO_PEEK))
		return GATE_HOLD;
	return video_keyframe_start(codec, peek) ? GATE_OPEN : GATE_HOLD;
}

/* The start of a datagram on a media port, read in turn as its first two
 * bytes, an RTCP or RTP header, then an RTP payload's first bytes: one
 * buffer, as the program's stack is short. */
union media_head {
	__u8 first[2];
	struct rtcp_hdr rtcp;
	struct rtp_fixed rtp;
	__u8 peek[VIDEO_PEEK];
};

SEC("tc")
int sfu_ingress(struct __sk_buff *skb)
{
	struct media *m;
	__u32 zero = 0;
	union media_head h;
	struct sender *s;
	__be32 ssrc;
	int hdr = -1;

	m = bpf_map_lookup_elem(&media_scratch, &zero);
	if (!m)
		return TC_ACT_UNSPEC;
	__builtin_memset(m, 0, sizeof(*m));
	if (parse_media(skb, m))
		return TC_ACT_UNSPEC;
	/* One rewrite cannot serve several datagrams merged into one skb. */
	if (skb->gso_segs > 1 || skb->gso_size)
		return outcome(SFU_SEGMENTED, m->len), TC_ACT_UNSPEC;
	if (m->len < 2 || bpf_skb_load_bytes(skb, m->l4_off + sizeof(struct udphdr), h.first, 2))
		return outcome(SFU_OTHER, m->len), TC_ACT_UNSPEC;
	switch (media_demux(h.first[0], h.first[1])) {
	case MEDIA_STUN:
		return outcome(SFU_STUN, m->len), TC_ACT_UNSPEC;
	case MEDIA_OTHER:
		return outcome(SFU_OTHER, m->len), TC_ACT_UNSPEC;
	case MEDIA_RTCP:
		if (m->len < sizeof(h.rtcp) ||
		    bpf_skb_load_bytes(skb, m->l4_off + sizeof(struct udphdr), &h.rtcp, sizeof(h.rtcp)) ||
		    (h.rtcp.vprc >> 6) != RTP_VERSION)
			return outcome(SFU_MALFORMED, m->len), TC_ACT_UNSPEC;
		/* Sender reports go to the receivers; feedback to the agent. */
		if (h.rtcp.pt != RTCP_SR)
			return outcome(SFU_RTCP_TO_AGENT, m->len), TC_ACT_UNSPEC;
		ssrc = h.rtcp.ssrc;
		m->ssrc = ssrc;
		break;
	case MEDIA_RTP:
		hdr = rtp_parse(skb, m->l4_off + sizeof(struct udphdr), m->len, &h.rtp);
		if (hdr < 0)
			return outcome(SFU_MALFORMED, m->len), TC_ACT_UNSPEC;
		ssrc = h.rtp.ssrc;
		m->ssrc = ssrc;
		m->ts = bpf_ntohl(h.rtp.ts);
		break;
	}
	s = lookup_sender(m, ssrc);
	if (!s)
		return outcome(SFU_UNKNOWN_SENDER, m->len), TC_ACT_UNSPEC;
	m->now = coarse_now();
	if (!source_admitted(skb, m, s))
		return outcome(SFU_SOURCE_REFUSED, m->len), TC_ACT_UNSPEC;
	if (s->sim_ssrc) { /* a simulcast encoding's */
		m->sim_ssrc = s->sim_ssrc;
		m->enc = s->encoding & (SIM_MAX_ENCODINGS - 1);
	}
	if (hdr >= 0) {
		m->seq = h.rtp.seq;
		/* A duplicate's transport-wide number is an arrival too: one left
		 * out of the feedback reads as lost to the sender's estimate. */
		if (s->twcc_ext && !twcc_find(skb, m, h.rtp.vpxcc, hdr, s->twcc_ext))
			twcc_arrived(s->arrivals, m->len, bpf_ntohs(m->twcc));
		if (s->history && history_seen_or_keep(skb, s->slot, bpf_ntohs(h.rtp.seq), bpf_ntohl(h.rtp.ts),
						       m->l4_off + sizeof(struct udphdr), m->len, bpf_ktime_get_ns()))
			return outcome(SFU_DUPLICATE, m->len), TC_ACT_SHOT;
		if (s->level_ext && !s->video)
			audio_level_count(skb, m, s, h.rtp.vpxcc, hdr);
		m->frame_end = s->video && (h.rtp.mpt & 0x80);
		m->padding = s->video && padding_only(skb, m, &h.rtp, hdr);
		if (s->video && s->dd_ext)
			video_frame(skb, m, s, &h.rtp, hdr);
		m->gate = video_gate(skb, m, s->video, hdr, h.peek);
		if (m->adapt && m->gate == GATE_OPEN)
			m->frame.flags |= FRAME_KEY;
		if (s->sim_ssrc) { /* (h holds the payload's first bytes now) */
			simulcast_packet(m, s);
			if (s->video == VIDEO_VP8 && !m->padding)
				vp8_read(skb, m, hdr, h.peek);
		}
	} else if (s->sim_ssrc && sim_report(skb, m, s)) {
		return outcome(SFU_MALFORMED, m->len), TC_ACT_UNSPEC;
	}
	return replicate(skb, m, s);
}
