/* The AV1 dependency descriptor (AV1 RTP payload specification, appendix
 * A) of an RTP packet: found among the header extensions (RFC 8285, both
 * profiles), its mandatory fields read. The template structure a key
 * frame's first packet attaches is user space's to parse (flag
 * DD_STRUCTURE). Go mirrors this (internal/sfu/dataplane/frame.go). */
#ifndef EBRTC_DD_H
#define EBRTC_DD_H

#include "common.h"
#include "hook.h"
#include "rtp.h"

/* Header extension elements (and padding bytes) looked at before giving up. */
#define RTP_EXT_MAX_STEPS 32
#define RTP_EXT_ONE_BYTE 0xBEDE
#define RTP_EXT_TWO_BYTE 0x1000 /* the upper 12 bits; the lower 4 are the app bits */

/* A header extension element: where its data is, from the frame's start. */
struct rtp_ext {
	__u32 off;
	__u32 len;
};

/* Finds element id in the header extension of the RTP header at off, the
 * header being hdr bytes long (rtp_parse checked the extension fits).
 * 0: found. Malformed elements end the search. */
INLINE int rtp_ext_find(hook_ctx *ctx, __u32 off, __u8 vpxcc, __u32 hdr, __u8 id, struct rtp_ext *e)
{
	__u32 pos = off + RTP_HDR_LEN + 4 * (vpxcc & 0x0f), end = off + hdr, data, len;
	__be16 head[2];
	__u8 b[2];
	int two;

	if (!(vpxcc & 0x10) || !id || hook_load_bytes(ctx, pos, head, sizeof(head)))
		return -1;
	if (bpf_ntohs(head[0]) == RTP_EXT_ONE_BYTE)
		two = 0;
	else if ((bpf_ntohs(head[0]) & 0xfff0) == RTP_EXT_TWO_BYTE)
		two = 1;
	else
		return -1;
	pos += sizeof(head);
	for (int i = 0; i < RTP_EXT_MAX_STEPS; i++) {
		if (pos >= end || hook_load_bytes(ctx, pos, b, 1))
			return -1;
		if (b[0] == 0) { /* padding */
			pos++;
			continue;
		}
		if (two) {
			if (pos + 2 > end || hook_load_bytes(ctx, pos + 1, &b[1], 1))
				return -1;
			data = pos + 2;
			len = b[1];
		} else {
			if ((b[0] >> 4) == 15) /* reserved: stop (RFC 8285 4.2) */
				return -1;
			data = pos + 1;
			len = (b[0] & 0x0f) + 1;
			b[0] >>= 4;
		}
		if (data + len > end)
			return -1;
		if (b[0] == id) {
			e->off = data;
			e->len = len;
			return 0;
		}
		pos = data + len;
	}
	return -1;
}

/* The descriptor's mandatory fields, and of the extended ones whether a
 * structure is attached (and its number of decode targets) or the
 * frame's DTIs are its own. */
#define DD_START 0x01
#define DD_END 0x02
#define DD_STRUCTURE 0x04
#define DD_CUSTOM_DTIS 0x08
#define DD_MAX_LEN 255

struct dd_fields {
	__u16 frame;
	__u8 template_id;
	__u8 flags;
	__u8 targets; /* the attached structure's decode targets; 0: none attached, or cut short */
};

INLINE int dd_read(hook_ctx *ctx, const struct rtp_ext *e, struct dd_fields *d)
{
	__u8 b[5] = {};

	if (e->len < 3 || hook_load_bytes(ctx, e->off, b, e->len >= 5 ? 5 : e->len == 4 ? 4 : 3))
		return -1;
	d->flags = (b[0] & 0x80 ? DD_START : 0) | (b[0] & 0x40 ? DD_END : 0) | (b[3] & 0x80 ? DD_STRUCTURE : 0) |
		   (b[3] & 0x20 ? DD_CUSTOM_DTIS : 0);
	d->template_id = b[0] & 0x3f;
	d->frame = (__u16)b[1] << 8 | b[2];
	/* Byte 3: five flags, then the structure's template id offset (6 bits)
	 * and its decode target count less one (5 bits). */
	d->targets = (d->flags & DD_STRUCTURE) && e->len >= 5 ? (b[4] & 0x1f) + 1 : 0;
	return 0;
}

#endif
