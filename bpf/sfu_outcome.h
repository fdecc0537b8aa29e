/* What the SFU data plane did with a datagram. Go mirrors the order
 * (internal/sfu/dataplane/outcome.go). */
#ifndef EBRTC_SFU_OUTCOME_H
#define EBRTC_SFU_OUTCOME_H

enum sfu_outcome {
	SFU_NOT_MEDIA,      /* not UDP to a media port: untouched, uncounted by media */
	SFU_STUN,           /* to the agent's socket */
	SFU_RTCP_TO_AGENT,  /* feedback (RR, REMB, NACK, PLI, ...) to the agent */
	SFU_OTHER,          /* neither STUN nor RTP/RTCP (DTLS...): to the stack */
	SFU_MALFORMED,      /* RTP/RTCP whose header does not hold: to the stack */
	SFU_UNKNOWN_SENDER, /* no sender joined with this address, port and SSRC */
	SFU_NO_RECEIVERS,   /* a known sender nobody receives: dropped */
	SFU_REPLICATED,     /* an input datagram replicated (each receiver's replica: counted on its own) */
	SFU_REPLICA,        /* one replica sent (many per input) */
	SFU_CLONE_FAILED,   /* a replica the target device refused */
	SFU_REWRITE_FAILED, /* headers could not be rewritten: dropped */
	SFU_FAMILY_MISMATCH, /* a receiver of the other family (user space never installs one) */
	SFU_SEGMENTED,      /* several datagrams in one skb (GSO, GRO): to the stack */
	SFU_SOURCE_REFUSED, /* a martian source or one not routed back through its interface: to the stack */
	SFU_NO_ROUTE,       /* a replica with no route, neighbour or MTU room towards its receiver: not sent */
	SFU_GATED,          /* a video replica held back: its receiver waits for a key frame */
	SFU_LAYER_DROPPED,  /* a video replica not sent: its receiver's decode target leaves the layer out */
	SFU_PADDING_UPCALL, /* a late packet of a dropped layer: user space sends the receiver padding in its place */
	SFU_EVENT_LOST,     /* user space could not be told (ring buffer full): a structure or a padding packet lost */
	SFU_LAYER_BUSY,     /* a video replica not sent: another CPU was deciding for its receiver (a loss it NACKs) */
	SFU_DUPLICATE,      /* a packet the sender's history holds (a retransmission, a duplicate): nobody gets it twice */
	SFU_OTHER_ENCODING, /* a simulcast encoding the receiver does not take: not its stream */
	/* Encrypted media (user space only: this program forwards plain RTP): */
	SFU_DTLS,           /* a DTLS record: to the agent, for its connection's handshake */
	SFU_UNPROTECTED,    /* RTP/RTCP from or to an address whose connection has no SRTP keys: dropped */
	SFU_UNAUTHENTIC,    /* SRTP/SRTCP that fails authentication, is replayed or truncated: dropped */
	/* User space only (this program hands such a datagram up as SFU_UNKNOWN_SENDER): */
	SFU_PROBE,          /* a sender's bandwidth probe: padding on SSRC 0 or its RTX SSRC, its transport-wide number logged */
	SFU_OUTCOME_MAX,
};

#endif
