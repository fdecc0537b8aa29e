/* TURN ChannelData (RFC 8656 section 12) and the offload maps' layouts.
 * Go mirrors these structs through bpf2go; change both together. */
#ifndef EBRTC_TURN_H
#define EBRTC_TURN_H

#include "common.h"

#define CHANNEL_HDR_LEN 4

struct channel_hdr {
	__be16 number;
	__be16 len;
};

/* One side of a relayed datagram. */
struct endpoint {
	union ip_addr ip;
	__be16 port;
	__u8 family; /* AF_INET or AF_INET6 */
	__u8 pad;
};

/* Where a matched datagram goes and how it is counted. For client->peer
 * routes src is the relay address on the wire and dst the peer; for
 * peer->client routes src is the server's listening address and dst the
 * client, and channel is the number to put in front of the data. */
struct route {
	struct endpoint src;
	struct endpoint dst;
	__be16 channel;
	__u16 flags;
	__u32 stats_slot;
	__u32 ip_id;  /* next IPv4 identification for datagrams without DF (RFC 6864) */
	__u32 bucket; /* rate_buckets index of the allocation and direction, or NO_BUCKET */
	/* The packets' source (peer or client) passed source validation on
	 * this interface, until then (source.h); written by any CPU, only ever
	 * with a passing verdict, so a torn pair is still a passing one. */
	__u32 src_ifindex;
	__u32 pad;
	__u64 src_until;
};

#define NO_BUCKET 0xffffffffU

/* Set on a client->peer route whose peer is another relay address of this
 * server, so the hairpin lookup is done only where it can hit. */
#define ROUTE_F_PEER_IS_RELAY 0x1

/* ChannelData from a client: keyed by the client's 5-tuple and channel. */
struct client_key_v4 {
	__be32 client_ip;
	__be32 server_ip;
	__be16 client_port;
	__be16 server_port;
	__be16 channel;
	__u16 pad;
};

struct client_key_v6 {
	__u8 client_ip[16];
	__u8 server_ip[16];
	__be16 client_port;
	__be16 server_port;
	__be16 channel;
	__u16 pad;
};

/* Plain UDP from a peer to a relay address. */
struct peer_key_v4 {
	__be32 peer_ip;
	__be32 relay_ip;
	__be16 peer_port;
	__be16 relay_port;
};

struct peer_key_v6 {
	__u8 peer_ip[16];
	__u8 relay_ip[16];
	__be16 peer_port;
	__be16 relay_port;
};

/* Where a route's datagrams leave and through what, as last looked up on
 * one CPU: the bpf_fib_lookup answer, and what the interfaces table said of
 * the ingress and egress interfaces. Kept beside the route's counters (one
 * per-CPU array slot per route), so a packet pays no lookup for it; valid
 * for NEXTHOP_TTL_NS, for one ingress interface, and while the interfaces
 * table is unchanged (iface_gen). */
struct path {
	__u64 expires;   /* CLOCK_MONOTONIC_COARSE, ns; 0: empty */
	__u32 ingress;   /* ifindex the answer is for */
	__u32 ifindex;   /* egress */
	__u32 gen;       /* iface_gen when taken */
	__u32 out_flags; /* egress's IFACE_F_* (0: not registered) */
	__u32 out_slot;  /* egress's xmit_pending slot */
	__u16 max_len;   /* largest IP length checked against the MTU */
	__u8 smac[6];
	__u8 dmac[6];
	__u8 in_mac[6];  /* ingress's MAC, all zero when unknown */
	__u8 in_known;   /* ingress is registered */
	__u8 pad[3];
};

#define NEXTHOP_TTL_NS 1000000000ULL

/* What user space says about an interface, by ifindex; flags 0: not
 * registered (test runs), nothing checked. */
struct iface_info {
	__u8 mac[6];
	__u16 pad;
	__u32 flags;         /* IFACE_F_* */
	__u64 xmit_failures; /* XDP frames sent here that it did not take */
	/* Of those, the fast datagrams by direction (a hairpin counts in both),
	 * which the fast counters must not count as relayed. */
	__u64 failed_to_peer;
	__u64 failed_to_client;
	__u32 slot; /* index in xmit_pending, 0..MAX_IFACE_SLOTS-1 */
	__u32 pad2;
};

/* Fast datagrams sent from XDP towards one interface on one CPU since its
 * queue last went out, by outcome (client->peer, peer->client, hairpin),
 * so that frames the interface refuses are taken off the right counters. */
struct xmit_pending {
	__u32 kinds[3];
	__u32 last; /* the kind of the latest */
};

#define MAX_IFACE_SLOTS 256

#define IFACE_F_REGISTERED 0x1
#define IFACE_F_XDP 0x2        /* our XDP program runs here */
#define IFACE_F_TC 0x4         /* our TC program runs here (takes what XDP cannot send) */
#define IFACE_F_XDP_EGRESS 0x8 /* XDP frames sent here are delivered (XDP_TX, redirect) */

#define MAX_IFACES 4096

struct flow_stats {
	__u64 packets;
	__u64 bytes;      /* UDP payload bytes as received */
	__u64 last_seen;  /* CLOCK_MONOTONIC_COARSE, ns */
	__u64 last_spill; /* when a packet was last handed to the server */
	__u32 since_spill;
	__u32 spilled;
	__u64 dropped;    /* over the allocation's bandwidth limit */
	struct path path; /* not a counter: the route's cached next hop */
};

struct outcome_stats {
	__u64 packets;
	__u64 bytes; /* fast: relayed data bytes; others: frame bytes as received */
};

#define MAX_LISTEN_PORTS 8

struct offload_config {
	__be16 listen_ports[MAX_LISTEN_PORTS]; /* 0 = unused */
	__u16 relay_port_min;                  /* host order */
	__u16 relay_port_max;
	__u8 ipv4_ttl;
	__u8 ipv6_hop_limit;
	__u16 flags;                           /* CONFIG_F_* */
	/* Heartbeat spill: hand a channel's packet to the server untouched every
	 * spill_every packets and/or every spill_interval_ns (0: off). */
	__u32 spill_every;
	__u32 pad;
	__u64 spill_interval_ns;
	/* Per-allocation bandwidth limit per direction (0: none), in relayed
	 * data bytes per second, and its bucket depth in nanobytes. */
	__u64 rate_limit;
	__u64 rate_burst;
};

/* Copy TURN control messages to user space (ebrtc offload learns channels). */
#define CONFIG_F_SNOOP 0x1

/* STUN (RFC 8489) header fields the snooper needs. */
#define STUN_HDR_LEN 20
#define STUN_MAGIC_COOKIE 0x2112A442

struct stun_hdr {
	__be16 type;
	__be16 len;
	__be32 cookie;
	__u8 txid[12];
};

/* What the snooper learned from one TURN control message, as parsed in BPF,
 * one record per message on the snoop_events ring buffer. Addresses and the
 * XOR'd attribute stay in network order; user space undoes the XOR. */
struct snoop_event {
	__u8 client[16];
	__u8 server[16];
	__be16 client_port;
	__be16 server_port;
	__u8 family;    /* AF_INET or AF_INET6 of the 5-tuple */
	__u8 direction; /* SNOOP_REQUEST (XDP ingress) or SNOOP_RESPONSE (TC egress) */
	__u16 stun_type; /* host order */
	__u8 txid[12];
	__u32 lifetime;  /* host order; with SNOOP_HAS_LIFETIME */
	__u16 channel;   /* host order; with SNOOP_HAS_CHANNEL */
	__u16 flags;     /* SNOOP_HAS_* */
	__u8 xor_family; /* STUN family of the XOR'd address: 1 IPv4, 2 IPv6 */
	__u8 pad;
	__be16 xor_port;
	__u8 xor_addr[16];
};

#define SNOOP_REQUEST 1
#define SNOOP_RESPONSE 2

#define SNOOP_HAS_CHANNEL 0x1
#define SNOOP_HAS_LIFETIME 0x2
#define SNOOP_HAS_ADDRESS 0x4 /* XOR-PEER-ADDRESS or XOR-RELAYED-ADDRESS */

#endif
