/* Rate adaptation per receiver: which decode target of a sender's scalable
 * stream (dependency descriptor, dd.h) each replica is sent, switched only
 * where the receiver's decoder can follow, and the sequence renumbering
 * (rewrite.h) that hides what was dropped on purpose and nothing else.
 * The Go reference is internal/sfu/layers (Replica.Decide). */
#ifndef EBRTC_LAYERS_H
#define EBRTC_LAYERS_H

#include "common.h"
#include "rewrite.h"
#include "video.h"

#define LAYERS_ALL 0xff      /* a target or current decode target: every layer, no renumbering */
#define LAYERS_NONE 0xfe     /* a target or current decode target: no video (paused), audio goes on */
#define LAYERS_MAX_TARGETS 8 /* decode targets one sender's structure may have */

/* DTIs (dd.h's decode target indications), 2 bits per decode target. */
#define DTI_NOT_PRESENT 0
#define DTI_SWITCH 2

/* A template id's entry in the sender's table (struct layer_templates). */
#define TEMPLATE_KNOWN (1U << 31)
#define TEMPLATE_DTIS(t) ((t) & 0xffff)
#define TEMPLATE_LAYER(t) (((t) >> 16) & (LAYERS_MAX_TARGETS - 1)) /* lowest decode target it serves */

/* Per sender, installed by user space from the structures the stream
 * attaches: template id -> its DTIs. Ids not in the structure in force
 * are unknown, and their frames go to everyone (fail open). */
struct layer_templates {
	__u32 t[64];
	__u32 targets; /* decode targets of the structure */
	__u32 pad;
};

/* One packet's frame, as every replica's decision needs it. */
#define FRAME_KNOWN 0x10 /* the template is known: dtis hold */
#define FRAME_KEY 0x20   /* a key frame's first packet (video.h): where paused video resumes */

struct frame_info {
	struct rewrite_packet p;
	__u16 dtis;
	__u8 flags;   /* FRAME_KNOWN, FRAME_KEY */
	__u8 targets; /* decode targets of the structure */
	struct vp8_pictures vp8; /* a VP8 payload's (a simulcast encoding's: rewritten) */
};

/* The fields a simulcast receiver's packets are rewritten in
 * (layers.Numbers): RTP sequence number and timestamp, the dependency
 * descriptor's frame number, a VP8 descriptor's picture numbering. */
struct sim_numbers {
	__u32 ts;
	__u16 seq;
	__u16 frame;
	struct vp8_pictures vp8; /* none in a padding verdict's */
};

/* A receiver's place among a simulcast sender's encodings
 * (layers.Simulcast, simulcast.h). */
struct sim_state {
	__u8 encoding; /* in force; SIM_NO_ENCODING before the first */
	__u8 sent;     /* last holds */
	__u16 pad;
	struct sim_numbers shift; /* added to the encoding's own numbers */
	struct sim_numbers last;  /* of the latest packet sent, as sent */
	__u32 pad2;
	__u64 last_at;     /* CLOCK_MONOTONIC_COARSE ns it went */
	__u64 switch_wait; /* since when a move to another encoding waits for its key frame; 0: none */
};

/* One receiver of one sender. current only moves at a frame's start;
 * switch_wait tells user space an up-switch waits for a switch point (it
 * asks the sender for a key frame when that takes too long). */
struct replica_layers {
	__u32 busy;   /* a CPU is deciding (layers_claim) */
	__u8 current; /* decode target in force; LAYERS_ALL: never adapted */
	__u8 pad[3];
	__u64 switch_wait; /* CLOCK_MONOTONIC_COARSE ns since an up-switch waits; 0: none */
	struct sim_state sim;
	struct rewrite_state rw;
};

enum layer_verdict {
	LAYER_AS_IS,   /* never adapted: the sender's packet as it is */
	LAYER_SEND,    /* under the new number */
	LAYER_DROP,
	LAYER_PADDING, /* emptied to padding under the new number */
	LAYER_BUSY,    /* another CPU was deciding for the receiver: not sent */
	LAYER_OTHER,   /* of a simulcast encoding the receiver does not take: not its stream */
};

INLINE __u8 dti_of(__u16 dtis, __u8 target)
{
	return (dtis >> (2 * (target & (LAYERS_MAX_TARGETS - 1)))) & 3;
}

/* Takes chosen at a switch point, or notes since when it waits for one. */
INLINE void layers_wait_for(struct replica_layers *l, int switch_point, __u8 chosen, __u64 now)
{
	if (switch_point) {
		l->current = chosen;
		l->switch_wait = 0;
	} else if (!l->switch_wait) {
		l->switch_wait = now;
	}
}

/* At a frame's first packet: down at once; up only at a frame that is a
 * switch point of the chosen target. Paused (LAYERS_NONE), a receiver's
 * decoder has lost its references: it resumes only at a key frame. */
INLINE void layers_switch(struct replica_layers *l, const struct frame_info *f, __u8 target, __u64 now)
{
	__u8 chosen = target == LAYERS_NONE ? LAYERS_NONE : target < f->targets ? target : f->targets - 1;

	if (chosen == LAYERS_NONE) {
		l->current = LAYERS_NONE;
		l->switch_wait = 0;
	} else if (l->current == LAYERS_NONE) {
		layers_wait_for(l, f->flags & FRAME_KEY, chosen, now);
	} else if (chosen < l->current) {
		l->current = chosen;
		l->switch_wait = 0;
	} else if (chosen > l->current) {
		layers_wait_for(l, dti_of(f->dtis, chosen) == DTI_SWITCH, chosen, now);
	} else {
		l->switch_wait = 0;
	}
}

/* Whether this CPU may decide for l now. A sender's packets reach one CPU
 * at a time but for a sender that moves between CPUs; a packet that finds
 * another CPU deciding is not sent to this receiver (a loss it NACKs),
 * where a spin lock would have the verifier walk the decision on every
 * path into it. */
INLINE int layers_claim(struct replica_layers *l)
{
	return __sync_lock_test_and_set(&l->busy, 1) == 0;
}

INLINE void layers_release(struct replica_layers *l)
{
	__sync_lock_test_and_set(&l->busy, 0); /* a full barrier: the decision is written first */
}

/* The caller has claimed l. */
INLINE enum layer_verdict layers_decide(struct replica_layers *l, const struct frame_info *f, __u8 target,
					 __u64 now, __u16 *number)
{
	int late = rw_late(&l->rw, f->p.seq), forward, logged;

	if ((f->flags & FRAME_KNOWN) && f->targets && !late) {
		/* Past the structure's targets (a key frame's first packet moves
		 * it down, but may come late): the highest the structure has. */
		if (l->current < LAYERS_NONE && l->current >= f->targets)
			l->current = f->targets - 1;
		/* A late start (reordered, retransmitted) must not switch mid-stream. */
		if (f->p.flags & LAST_START)
			layers_switch(l, f, target, now);
	}
	forward = l->current != LAYERS_NONE && (!(f->flags & FRAME_KNOWN) || l->current == LAYERS_ALL ||
						 dti_of(f->dtis, l->current) != DTI_NOT_PRESENT);
	logged = rw_frame(&l->rw, f->p.frame);
	if (late && logged >= 0 && !(f->p.flags & LAST_PADDING))
		forward = logged; /* a late packet goes as its frame went */
	switch (rw_rewrite(&l->rw, &f->p, forward, number)) {
	case REWRITE_SEND:
		return LAYER_SEND;
	case REWRITE_PADDING:
		return LAYER_PADDING;
	default:
		return LAYER_DROP;
	}
}

#endif
