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
