/* The AF_XDP receive path's ABI between the classifier (xsk_rx.c) and
 * user space (internal/xsk, pkg/afxdp): what a registered port says, the
 * metadata prefix in front of each redirected datagram, and the outcomes.
 * Go mirrors the outcome list (afxdp.Outcome): keep the order in sync.
 */
#ifndef EBRTC_XSK_RX_H
#define EBRTC_XSK_RX_H

#include "common.h"

/* XSK slots: interface slot base + RX queue. */
#define XSK_SLOTS 256
/* Ports with their own counters. */
#define RX_PORT_SLOTS 1024

enum rx_outcome {
	RX_REDIRECT = 0, /* to the AF_XDP socket of the frame's RX queue */

	/* Not for a registered socket: the kernel's, untouched. */
	RX_PASS_NOT_IP,
	RX_PASS_NOT_UDP,
	RX_PASS_UNREGISTERED, /* UDP to a port no socket registered */
	RX_PASS_NOT_UNICAST,  /* multicast or broadcast destination */
	RX_PASS_OTHER_HOST,   /* addressed to another MAC (promiscuous mode) */
	RX_PASS_VLAN,
	RX_PASS_IP_OPTIONS,   /* the port is not read behind options or in fragments */
	RX_PASS_FRAGMENT,
	RX_PASS_IPV6_EXT_HEADER,
	RX_PASS_BAD_LENGTH,

	/* For a registered port, but the kernel's to judge or deliver: the
	 * socket still receives it through its normal path (a fallback). */
	RX_FALLBACK_BAD_IP_CHECKSUM,
	RX_FALLBACK_ZERO_UDP_CHECKSUM, /* IPv6 forbids it; the kernel drops it */
	RX_FALLBACK_PARTIAL_CHECKSUM,  /* the sender's device finishes it: only the kernel knows */
	RX_FALLBACK_OTHER_DESTINATION, /* not the address the socket is bound to, or not local */
	RX_FALLBACK_MARTIAN_SOURCE,
	RX_FALLBACK_REVERSE_PATH,
	RX_FALLBACK_OVERSIZE,     /* longer than a UMEM frame, or in several buffers */
	RX_FALLBACK_RING_FULL,    /* the reader holds every frame: no fill-ring credit */
	RX_FALLBACK_NO_SOCKET,    /* no AF_XDP socket on this RX queue */
	RX_FALLBACK_NO_HEADROOM,  /* bpf_xdp_adjust_head refused */
	RX_FALLBACK_OTHER_INTERFACE, /* the port's conn does not receive on this interface */

	RX_OUT_MAX,
};

/* A registered port of one family: where its socket is bound. A socket
 * bound to a wildcard accepts any local destination (checked by route
 * lookup); otherwise the destination must be the bound address. A
 * dual-stack socket registers both families. */
struct rx_port_key {
	__u16 port; /* host order */
	__u8 family;
	__u8 pad;
};

struct rx_port {
	union ip_addr addr;
	__u64 ifaces; /* the interfaces its conn receives on: bit rx_iface.id */
	__u32 slot;   /* counters: rx_port_counts[slot * RX_OUT_MAX + outcome] */
	__u8 any;     /* bound to 0.0.0.0 or :: */
	__u8 pad[3];
};

/* An interface the classifier runs on. */
struct rx_iface {
	__u8 mac[6];
	__u16 queues;    /* RX queues with a socket slot */
	__u32 xsk_base;  /* its queues' XSK slots start here */
	__u32 id;        /* 0-63: its bit in rx_port.ifaces */
};

struct rx_counter {
	__u64 packets;
	__u64 bytes;
};

/* In front of the UDP header of every redirected datagram, in place of the
 * Ethernet and IP headers (which are at least 34 bytes). */
struct rx_meta {
	union ip_addr saddr; /* IPv4 in the first word */
	__u64 rx_ns;         /* bpf_ktime_get_ns() at the hook: when it arrived */
	__u16 pseudo_sum;    /* folded pseudo-header sum, for user space's checksum check */
	__u8 family;         /* AF_INET or AF_INET6 */
	__u8 version;        /* RX_META_VERSION */
	__u32 ifindex;       /* where it arrived */
};

#define RX_META_VERSION 1

#endif
