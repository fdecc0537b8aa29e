/* The client-to-mixer audio level (RFC 6464): a one-byte header extension
 * element, V (the sender's voice activity) and the level in -dBov (0
 * loudest, 127 silence). internal/sfu/dataplane's AudioLevelOf is the Go
 * reference, held to this by TestAudioLevelAgreesWithBPF. */
#ifndef EBRTC_AUDIO_LEVEL_H
#define EBRTC_AUDIO_LEVEL_H

#include "dd.h"

#define AUDIO_LEVEL_SILENT 127

/* What a sender's audio levels add up to (per CPU): the SFU ranks
 * speakers on the differences from round to round. */
struct audio_level {
	__u64 packets;  /* with the element */
	__u64 loudness; /* sum of 127 - level: louder is more */
	__u64 voiced;   /* with V set */
};

/* The element's byte of the RTP packet at off (hdr bytes of header), if it
 * carries element id: 0, else -1. */
INLINE int audio_level_read(hook_ctx *ctx, __u32 off, __u8 vpxcc, __u32 hdr, __u8 id, __u8 *b)
{
	struct rtp_ext e;

	if (rtp_ext_find(ctx, off, vpxcc, hdr, id, &e) || e.len < 1 || hook_load_bytes(ctx, e.off, b, 1))
		return -1;
	return 0;
}

INLINE void audio_level_add(struct audio_level *a, __u8 b)
{
	if (!a)
		return;
	a->packets++;
	a->loudness += AUDIO_LEVEL_SILENT - (b & 0x7f);
	a->voiced += b >> 7;
}

#endif
