/* The SFU data plane's map layouts (ebrtc sfu). Go mirrors these structs
 * through bpf2go; change both together. */
#ifndef EBRTC_SFU_H
#define EBRTC_SFU_H

#include "common.h"

#define SFU_MAX_MEDIA 8
#define SFU_MAX_FANOUT 128 /* receivers of one sender (a power of two) */
#define SFU_MAX_SENDERS 16384

/* One of the SFU's media sockets: only datagrams the kernel would deliver
 * to it are the data plane's (not ones for another address passing through). */
struct sfu_media {
	union ip_addr addr;
	__be16 port; /* 0: unused */
	__u8 family;
	__u8 pad;
};

struct sfu_config {
	struct sfu_media media[SFU_MAX_MEDIA];
};

/* A sender: the address and port it sends from, and its SSRC. */
struct sender_key_v4 {
	__be32 addr;
	__be32 ssrc;
	__be16 port;
	__u16 pad;
};

struct sender_key_v6 {
	__u8 addr[16];
	__be32 ssrc;
	__be16 port;
	__u16 pad;
};

struct sender {
	__u32 id;   /* key of its fanout */
	__u32 slot; /* its counters in sender_stats; its templates, layer bytes and history (a simulcast encoding's own) */
	/* The sender's address passed the kernel's source checks (source.h)
	 * on this interface, until then: written by any CPU, only ever with a
	 * passing verdict, so a torn pair is still a passing one. */
	__u32 src_ifindex;
	__u8 video; /* enum video_codec of this SSRC: its new receivers wait for a key frame */
	__u8 dd_ext; /* header extension id of its dependency descriptor (0: none): layers adapt per receiver */
	__u8 twcc_ext; /* header extension id of its transport-wide sequence number (0: none): legs rewrite it */
	__u8 history; /* its packets are kept (history.h): receivers' NACKs are answered by the SFU */
	__u32 arrivals; /* twcc_legs index + 1 of the log of its transport-wide numbers' arrivals (0: none) */
	__u8 level_ext; /* header extension id of its audio level (RFC 6464; 0: none): counted for speakers */
	__u8 encoding;  /* of a simulcast video: which (0 the lowest); slot is its own */
	__u16 pad;
	__be32 sim_ssrc; /* of a simulcast video: the SSRC receivers get it under; 0: not simulcast */
	__u32 pad2;
	__u64 src_until;
};

/* One receiver of a sender's stream: the replica leaves from the SFU's
 * address and port towards the receiver's; the kernel's routes and
 * neighbours say where (replica_paths). */
struct replica {
	union ip_addr saddr;
	union ip_addr daddr;
	__be16 sport;
	__be16 dport;
	__u8 family; /* the sender's: user space pairs only the same family */
	__u8 ttl;    /* or hop limit: the SFU is the receiver's peer, not a router */
	__u16 pad;
	__u32 slot;  /* its counters in replica_stats, its path in replica_paths */
	__u32 twcc;  /* its transport-wide numbers (twcc.h): twcc_legs index + 1; 0: none (REMB) */
};

/* Where one receiver's replicas leave, as bpf_fib_lookup last said on
 * this CPU, for a second, and for datagrams up to max_len. */
struct replica_path {
	__u64 expires; /* CLOCK_MONOTONIC_COARSE, ns; 0: empty */
	__u32 ifindex;
	__u16 max_len; /* largest IP length checked against the MTU */
	__u16 pad;
	__u8 macs[12]; /* destination, then source: the Ethernet header's first 12 bytes */
	__u32 pad2;
};

#define REPLICA_PATH_TTL_NS 1000000000ULL

/* Every receiver of one sender. Replaced whole by user space (a hash map's
 * update swaps the element), so a packet never sees half a list. */
struct fanout {
	__u32 count;
	__u32 pad;
	struct replica r[SFU_MAX_FANOUT];
};

struct sfu_stats {
	__u64 packets;
	__u64 bytes;  /* UDP payload bytes */
	__u64 frames; /* video packets with the marker bit: frames (ended) */
};

/* What user space is told through video_events. */
enum video_event_kind {
	VIDEO_EVENT_STRUCTURE = 1, /* a sender attached a template structure: install its templates */
	VIDEO_EVENT_PADDING = 2,   /* send a receiver a padding-only packet under number (closes a kept gap) */
};

struct video_event {
	__u32 kind;
	__u32 sender;      /* the sender's slot */
	struct replica r;  /* PADDING: to whom, from where */
	__u16 number;      /* PADDING: the receiver's sequence number */
	__u16 len;         /* STRUCTURE: descriptor bytes in dd */
	__u8 rtp[12];      /* the packet's fixed RTP header (payload type, timestamp, SSRC) */
	__u8 dd[256];      /* STRUCTURE: the dependency descriptor */
};

#endif
