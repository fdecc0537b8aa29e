/* Video payload formats: where a key frame starts, so that a receiver
 * that joins mid-stream is sent nothing it cannot decode. Only the first
 * bytes of the RTP payload are read. Go mirrors this
 * (internal/sfu/dataplane/video.go); keep both the same. */
#ifndef EBRTC_VIDEO_H
#define EBRTC_VIDEO_H

#include "common.h"

/* Which payload format a sender's SSRC carries; VIDEO_NONE (audio) is
 * never held back. */
enum video_codec {
	VIDEO_NONE,
	VIDEO_AV1,
	VIDEO_VP8,
	VIDEO_VP9,
	VIDEO_H264,
};

/* A key frame's first packet is never shorter: shorter ones are not one. */
#define VIDEO_PEEK 8

/* AV1 (RTP payload format for AV1, 4.4): the aggregation header's N bit
 * marks the first packet of a coded video sequence, which starts with a
 * key frame. */
INLINE int av1_keyframe_start(const __u8 *p)
{
	return p[0] & 0x08;
}

/* VP8 (RFC 7741 4.2, 4.3): the start (S) of partition 0, and the payload
 * header's inverse key frame bit P clear. The optional descriptor bytes
 * (I with a 7- or 15-bit picture ID, L, T/K) come before it. */
INLINE int vp8_keyframe_start(const __u8 *p)
{
	__u32 off = 1;

	if ((p[0] & 0x1f) != 0x10) /* S set, partition index 0 */
		return 0;
	if (p[0] & 0x80) {
		__u8 x = p[1];

		off = 2;
		if (x & 0x80)
			off += (p[2] & 0x80) ? 2 : 1;
		if (x & 0x40)
			off++;
		if (x & 0x30)
			off++;
	}
	return off < VIDEO_PEEK && !(p[off & (VIDEO_PEEK - 1)] & 0x01);
}

/* The picture numbering of a VP8 payload descriptor (RFC 7741 4.2), which
 * a simulcast receiver's packets are rewritten in: each encoding numbers
 * its pictures from a start of its own (layers.VP8). */
#define VP8_PICTURE 0x01 /* a 15-bit PictureID */
#define VP8_TL0 0x02     /* TL0PICIDX */
#define VP8_KEYIDX 0x04

struct vp8_pictures {
	__u16 picture; /* 15 bits */
	__u8 tl0;
	__u8 keyidx; /* 5 bits */
	__u8 fields; /* which the packet carries: VP8_PICTURE, VP8_TL0, VP8_KEYIDX */
	__u8 pad[3];
};

/* The descriptor's bytes the numbering can take: the first, the extension
 * byte, a 15-bit PictureID (VP8_HEAD), TL0PICIDX, TID/Y/KEYIDX. */
#define VP8_HEAD 4
#define VP8_DESCRIPTOR 6
#define VP8_PICTURE_OFF 2 /* with the M bit: 0x8000 | picture */
#define VP8_TAIL_OFF 4    /* TL0PICIDX and TID/Y/KEYIDX, or TID/Y/KEYIDX and the payload's */

/* What p, a VP8 payload's first have bytes (VP8_HEAD or VP8_DESCRIPTOR;
 * the rest zero), numbers: only a descriptor with a 15-bit PictureID (what
 * browsers send), and only with the word at VP8_TAIL_OFF whole where it
 * carries TL0PICIDX or TID/KEYIDX (the word is rewritten whole). */
INLINE void vp8_pictures_of(const __u8 *p, __u32 have, struct vp8_pictures *v)
{
	__u8 x = p[1];

	if (!(p[0] & 0x80) || !(x & 0x80) || !(p[2] & 0x80) || ((x & 0x70) ? VP8_DESCRIPTOR : VP8_HEAD) > have)
		return;
	v->picture = (__u16)(p[2] & 0x7f) << 8 | p[3];
	v->fields = VP8_PICTURE;
	if (x & 0x40) {
		v->tl0 = p[4];
		v->fields |= VP8_TL0;
	}
	if (x & 0x10) {
		v->keyidx = p[(x & 0x40) ? 5 : 4] & 0x1f;
		v->fields |= VP8_KEYIDX;
	}
}

/* The descriptor's two bytes at VP8_TAIL_OFF (as they are: tail) with v's
 * TL0PICIDX and KEYIDX in them, in network order. */
INLINE __be16 vp8_tail(__be16 tail, const struct vp8_pictures *v)
{
	__u8 b[2];

	__builtin_memcpy(b, &tail, 2);
	if (v->fields & VP8_TL0) {
		b[0] = v->tl0;
		if (v->fields & VP8_KEYIDX)
			b[1] = (b[1] & 0xe0) | v->keyidx;
	} else if (v->fields & VP8_KEYIDX) {
		b[0] = (b[0] & 0xe0) | v->keyidx;
	}
	__builtin_memcpy(&tail, b, 2);
	return tail;
}

/* VP9 (RFC 9628 4.2): the beginning (B) of a frame that is not
 * inter-picture predicted (P clear), in the lowest spatial layer. */
INLINE int vp9_keyframe_start(const __u8 *p)
{
	__u32 off = 1;

	if ((p[0] & 0x48) != 0x08) /* P clear, B set */
		return 0;
	if (!(p[0] & 0x20)) /* no layer indices: one spatial layer */
		return 1;
	if (p[0] & 0x80)
		off += (p[1] & 0x80) ? 2 : 1;
	return ((p[off & (VIDEO_PEEK - 1)] >> 1) & 0x07) == 0;
}

/* H.264 (RFC 6184 5.2-5.8): a sequence parameter set opens every IDR
 * access unit Chromium sends, alone or first in a STAP-A. */
#define H264_SPS 7
#define H264_STAP_A 24

INLINE int h264_keyframe_start(const __u8 *p)
{
	__u8 type = p[0] & 0x1f;

	if (type == H264_STAP_A)
		type = p[3] & 0x1f; /* after the first NAL unit's 16-bit size */
	return type == H264_SPS;
}

/* Whether peek (the payload's first VIDEO_PEEK bytes) starts a key frame. */
INLINE int video_keyframe_start(__u8 codec, const __u8 *peek)
{
	switch (codec) {
	case VIDEO_AV1:
		return av1_keyframe_start(peek);
	case VIDEO_VP8:
		return vp8_keyframe_start(peek);
	case VIDEO_VP9:
		return vp9_keyframe_start(peek);
	case VIDEO_H264:
		return h264_keyframe_start(peek);
	}
	return 0;
}

#endif
