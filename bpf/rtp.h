/* RTP and RTCP (RFC 3550) on a media port: demultiplexing (RFC 7983,
 * RFC 5761) and the RTP header's bounds, CSRCs and header extension
 * included. Reads go through hook_load_bytes (hook.h), so the payload need
 * not be in the linear part of an skb. */
#ifndef EBRTC_RTP_H
#define EBRTC_RTP_H

#include "common.h"
#include "hook.h"

#define RTP_HDR_LEN 12
#define RTP_VERSION 2
#define RTCP_SR 200

/* What a datagram on a media port is, from its first two bytes. */
enum media_kind {
	MEDIA_STUN,  /* first byte 0-3 (RFC 7983) */
	MEDIA_RTP,   /* 128-191, second byte not an RTCP type */
	MEDIA_RTCP,  /* 128-191, second byte 192-223 (RFC 5761 section 4) */
	MEDIA_OTHER, /* DTLS, ZRTP, anything else */
};

INLINE enum media_kind media_demux(__u8 b0, __u8 b1)
{
	if (b0 <= 3)
		return MEDIA_STUN;
	if (b0 < 128 || b0 > 191)
		return MEDIA_OTHER;
	if (b1 >= 192 && b1 <= 223)
		return MEDIA_RTCP;
	return MEDIA_RTP;
}

/* The fixed part of an RTP header as the wire has it. */
struct rtp_fixed {
	__u8 vpxcc;
	__u8 mpt;
	__be16 seq;
	__be32 ts;
	__be32 ssrc;
};

/* Checks the RTP header at off (len bytes of UDP payload) and returns
 * where its payload starts, or -1 when it is malformed: not version 2,
 * shorter than its CSRC list or extension say, or padding longer than
 * what follows the header. */
INLINE int rtp_parse(hook_ctx *ctx, __u32 off, __u32 len, struct rtp_fixed *h)
{
	__u32 hdr;
	__be16 words;
	__u8 pad;

	if (len < RTP_HDR_LEN || hook_load_bytes(ctx, off, h, sizeof(*h)))
		return -1;
	hdr = RTP_HDR_LEN + 4 * (h->vpxcc & 0x0f);
	if ((h->vpxcc >> 6) != RTP_VERSION || len < hdr)
		return -1;
	if (h->vpxcc & 0x10) {
		/* RFC 3550 5.3.1: profile, then the length in 32-bit words. */
		if (len < hdr + 4 || hook_load_bytes(ctx, off + hdr + 2, &words, 2))
			return -1;
		hdr += 4 + 4 * bpf_ntohs(words);
		if (len < hdr)
			return -1;
	}
	if (h->vpxcc & 0x20) {
		/* RFC 3550 5.1: the last byte counts the padding, itself included. */
		if (len == 0 || hook_load_bytes(ctx, off + len - 1, &pad, 1) || pad == 0 || pad > len - hdr)
			return -1;
	}
	return hdr;
}

/* An RTCP packet's first header: its sender's SSRC follows the length. */
struct rtcp_hdr {
	__u8 vprc;
	__u8 pt;
	__be16 len; /* in 32-bit words, minus one */
	__be32 ssrc;
};

#endif
