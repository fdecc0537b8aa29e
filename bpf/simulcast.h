/* Simulcast (RFC 8853) per receiver: a sender sends the same video as
 * several encodings, each an RTP stream of its own, and each receiver
 * takes one of them, changed only at a key frame of the one it moves to,
 * rewritten into one continuous stream (the SFU's SSRC, numbers that go on
 * across a switch). The Go reference is internal/sfu/layers
 * (Replica.DecideEncoding), which TestSimulcastAgreesWithBPF holds this to. */
#ifndef EBRTC_SIMULCAST_H
#define EBRTC_SIMULCAST_H

#include "common.h"
#include "layers.h"

#define SIM_MAX_ENCODINGS 4
#define SIM_NO_ENCODING 0xff
#define SIM_ALL_OF 0xf /* in a target's low four bits: every layer of the encoding */
/* How recently an encoding must have sent media (not padding) to be
 * offered: a publisher whose uplink narrows stops its top encodings. */
#define SIM_LIVE_NS 1500000000ULL

/* Every encoding of one simulcast video, as packets find them (user space
 * reads it for the link's allocation). Written by any CPU unlocked: a
 * time, and flags each written whole. */
struct sim_encodings {
	__u64 last_at[SIM_MAX_ENCODINGS]; /* CLOCK_MONOTONIC_COARSE ns of its latest media packet; 0: none */
	__u8 no_dd[SIM_MAX_ENCODINGS];    /* its media carries no dependency descriptor: one target, all of it */
	__u32 pad;
};

/* Whether an encoding whose latest media packet came at last_at (0: none)
 * is live at now; last_at may be after now (another CPU's clock read
 * later). */
INLINE int sim_live(__u64 last_at, __u64 now)
{
	return last_at && (now <= last_at || now - last_at <= SIM_LIVE_NS);
}

/* The highest encoding live at now (0 if none). */
INLINE __u8 sim_top(const struct sim_encodings *e, __u64 now)
{
#pragma unroll
	for (int i = SIM_MAX_ENCODINGS - 1; i > 0; i--)
		if (sim_live(e->last_at[i], now))
			return i;
	return 0;
}

/* The time from then to now on the 90 kHz video clock, at least one tick
 * (now may be before then: another CPU, or the slow path, decided last). */
INLINE __u32 video_ticks(__u64 then, __u64 now)
{
	__u64 t = now > then ? (now - then) * 9 / 100000 : 0;

	return t < 1 ? 1 : (__u32)t;
}

/* v with shift added to each field v carries (layers.VP8.Shifted). */
INLINE void vp8_shifted(const struct vp8_pictures *v, const struct vp8_pictures *shift, struct vp8_pictures *out)
{
	out->fields = v->fields;
	out->picture = (v->fields & VP8_PICTURE) ? (v->picture + shift->picture) & 0x7fff : 0;
	out->tl0 = (v->fields & VP8_TL0) ? v->tl0 + shift->tl0 : 0;
	out->keyidx = (v->fields & VP8_KEYIDX) ? (v->keyidx + shift->keyidx) & 0x1f : 0;
}

/* last once sent went out: a field sent takes its value. */
INLINE void vp8_after(struct vp8_pictures *last, const struct vp8_pictures *sent)
{
	if (sent->fields & VP8_PICTURE)
		last->picture = sent->picture;
	if (sent->fields & VP8_TL0)
		last->tl0 = sent->tl0;
	if (sent->fields & VP8_KEYIDX)
		last->keyidx = sent->keyidx;
	last->fields |= sent->fields;
}

/* The shift that makes next (a key frame's first packet of the encoding
 * moved to) follow last: each field both carry one up. */
INLINE void vp8_continuing(const struct vp8_pictures *last, const struct vp8_pictures *next, struct vp8_pictures *s)
{
	__u8 both = last->fields & next->fields;

	s->picture = (both & VP8_PICTURE) ? (last->picture + 1 - next->picture) & 0x7fff : 0;
	s->tl0 = (both & VP8_TL0) ? last->tl0 + 1 - next->tl0 : 0;
	s->keyidx = (both & VP8_KEYIDX) ? (last->keyidx + 1 - next->keyidx) & 0x1f : 0;
	s->fields = 0;
}

/* Moves the receiver to encoding enc at f, the first packet of one of its
 * key frames: its numbers continue where the last packet sent left off,
 * its timestamps by the time since then. */
INLINE void sim_switch(struct replica_layers *l, __u8 enc, const struct frame_info *f, __u32 ts, __u64 now)
{
	l->sim.encoding = enc;
	l->sim.switch_wait = 0;
	l->current = LAYERS_NONE;
	l->switch_wait = 0;
	__builtin_memset(&l->rw, 0, sizeof(l->rw));
	if (!l->sim.sent)
		return;
	l->sim.shift.seq = l->sim.last.seq + 1 - f->p.seq;
	l->sim.shift.ts = l->sim.last.ts + video_ticks(l->sim.last_at, now) - ts;
	l->sim.shift.frame = l->sim.last.frame + 1 - f->p.frame;
	vp8_continuing(&l->sim.last.vp8, &f->vp8, &l->sim.shift.vp8);
}

/* The layer in force at a frame no descriptor describes (an encoding that
 * sends none: Firefox's VP8), which has no layers: all of it or, paused,
 * none, resumed at a key frame. */
INLINE void sim_switch_undescribed(struct replica_layers *l, const struct frame_info *f, __u8 layer)
{
	if (layer == LAYERS_NONE)
		l->current = LAYERS_NONE;
	else if (l->current == LAYERS_NONE && (f->flags & FRAME_KEY) && (f->p.flags & LAST_START))
		l->current = 0;
}

/* A simulcast receiver's decision (the caller has claimed l) on f, a
 * packet of encoding enc with RTP timestamp ts; target is the receiver's
 * (the encoding in its high four bits, a decode target in the low four;
 * LAYERS_ALL; LAYERS_NONE), top the highest encoding live. out: the
 * numbers the packet goes out with. */
INLINE enum layer_verdict sim_decide(struct replica_layers *l, const struct frame_info *f, __u8 enc, __u32 ts,
				     __u8 target, __u8 top, __u64 now, struct sim_numbers *out)
{
	__u8 want = top, layer = LAYERS_ALL;
	enum layer_verdict v;
	int switched = 0, waits;
	__u16 n = 0;

	if (target == LAYERS_NONE) {
		want = l->sim.encoding;
		layer = LAYERS_NONE;
	} else if (target != LAYERS_ALL) {
		want = target >> 4 < top ? target >> 4 : top;
		layer = (target & 0xf) == SIM_ALL_OF ? LAYERS_ALL : target & 0xf;
	}
	if (enc != l->sim.encoding) {
		if (enc != want || !(f->flags & FRAME_KEY) || !(f->p.flags & LAST_START)) {
			/* (also where the one in force went silent: nothing else notes it) */
			if (enc == want && layer != LAYERS_NONE && !l->sim.switch_wait)
				l->sim.switch_wait = now;
			return LAYER_OTHER;
		}
		sim_switch(l, enc, f, ts, now);
		switched = 1;
	}
	waits = want != enc && layer != LAYERS_NONE;
	if (waits && want < enc)
		layer = 0; /* while the lower one's key frame is awaited, the least of this one */
	if (!(f->flags & FRAME_KNOWN))
		sim_switch_undescribed(l, f, layer);
	v = layers_decide(l, f, layer, now, &n);
	if (switched) /* the earlier packets of this encoding take no number of the last one's */
		rw_mark(&l->rw, l->rw.top + 1, REWRITE_HISTORY - 1, 1);
	if (!waits)
		l->sim.switch_wait = 0;
	else if (!l->sim.switch_wait)
		l->sim.switch_wait = now; /* the agent asks for key frames when this lasts */
	if (v != LAYER_SEND && v != LAYER_PADDING)
		return LAYER_DROP;
	out->seq = n + l->sim.shift.seq;
	out->ts = ts + l->sim.shift.ts;
	out->frame = f->p.frame + l->sim.shift.frame;
	if (v == LAYER_SEND)
		vp8_shifted(&f->vp8, &l->sim.shift.vp8, &out->vp8);
	if (!l->sim.sent || (__s16)(out->seq - l->sim.last.seq) > 0) {
		l->sim.last.seq = out->seq;
		l->sim.last.ts = out->ts;
		l->sim.last.frame = out->frame;
		vp8_after(&l->sim.last.vp8, &out->vp8);
		l->sim.last_at = now;
		l->sim.sent = 1;
	}
	return v;
}

#endif
