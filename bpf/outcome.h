/* Every packet the data plane sees ends in exactly one outcome, counted in
 * the per-CPU "outcomes" map. Go mirrors this list (offload.Outcome): keep the
 * order in sync with internal/offload/outcome.go.
 */
#ifndef EBRTC_OUTCOME_H
#define EBRTC_OUTCOME_H

enum outcome {
	/* Relayed in the kernel. */
	OUT_FAST_CLIENT_TO_PEER = 0,
	OUT_FAST_PEER_TO_CLIENT,
	OUT_FAST_HAIRPIN, /* client -> own relay -> client, both legs in XDP */

	/* Not TURN traffic: handed to the kernel without a look. */
	OUT_PASS_NOT_IP,
	OUT_PASS_NOT_UDP,
	OUT_PASS_NOT_TURN,
	OUT_PASS_OTHER_HOST, /* addressed to another MAC (promiscuous mode): the kernel drops it */

	/* TURN (or unparseable) traffic handed to the kernel untouched: the slow path. */
	OUT_SLOW_VLAN,
	OUT_SLOW_IP_OPTIONS,
	OUT_SLOW_FRAGMENT,
	OUT_SLOW_IPV6_EXT_HEADER,
	OUT_SLOW_BAD_LENGTH,
	OUT_SLOW_BAD_IP_CHECKSUM,
	OUT_SLOW_ZERO_UDP_CHECKSUM,
	OUT_SLOW_NOT_CHANNEL_DATA,
	OUT_SLOW_UNKNOWN_CHANNEL,
	OUT_SLOW_CHANNEL_LENGTH,
	OUT_SLOW_UNKNOWN_PEER,
	OUT_SLOW_MARTIAN_SOURCE, /* source the kernel never accepts: ours, loopback, multicast... */
	OUT_SLOW_REVERSE_PATH,   /* source not routed back through the ingress interface */
	OUT_SLOW_FIB_NO_NEIGHBOUR,
	OUT_SLOW_FIB_FRAG_NEEDED,
	OUT_SLOW_FIB_OTHER,
	OUT_SLOW_NO_EGRESS_PORT,
	OUT_SLOW_NO_HEADROOM,
	OUT_SLOW_SPILL, /* heartbeat: a sample of a channel's packets for the server */
	OUT_SLOW_GSO,              /* TC: a segmented (GSO/GRO) skb */
	OUT_SLOW_NONLINEAR,        /* TC: an skb that could not be made linear */
	OUT_SLOW_CHECKSUM_OFFLOAD, /* TC: a partial checksum the program cannot carry over */

	/* Dropped: the packet could not be restored after a partial rewrite. */
	OUT_DROP_REWRITE_FAILED,
	/* Dropped: the allocation is over its bandwidth limit in this direction. */
	OUT_DROP_RATE_LIMIT,
	/* Sent from XDP (XDP_TX, redirect) but not taken by the egress device,
	 * counted by the xdp tracepoints (turn_offload.c); the fast counts
	 * include these. */
	OUT_DROP_XMIT_FAILED,

	OUT_MAX,
};

/* Internal: parsing succeeded, keep going. Never counted. */
#define OUT_CONTINUE OUT_MAX

#endif
