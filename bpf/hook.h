/* What differs between the two hooks the TURN fast path runs at: XDP (in
 * the driver, before an skb exists) and TC ingress (an skb, on any device).
 * turn_offload.c is compiled once per hook; EBRTC_TC selects TC. Everything
 * that only one hook can do lives in its own block there.
 */
#ifndef EBRTC_HOOK_H
#define EBRTC_HOOK_H

#include "common.h"
#include <linux/pkt_cls.h>

#ifdef EBRTC_TC
typedef struct __sk_buff hook_ctx;
/* TC_ACT_UNSPEC (tcx: TCX_NEXT), not TC_ACT_OK: what we do not relay goes
 * on to the interface's other TC programs and filters (a CNI's policy). */
#define HOOK_PASS TC_ACT_UNSPEC
#define HOOK_DROP TC_ACT_SHOT
#define hook_load_bytes(ctx, off, buf, n) bpf_skb_load_bytes(ctx, off, buf, n)
#define hook_store_bytes(ctx, off, buf, n) bpf_skb_store_bytes(ctx, off, buf, n, 0)
#else
typedef struct xdp_md hook_ctx;
#define HOOK_PASS XDP_PASS
#define HOOK_DROP XDP_DROP
#define hook_load_bytes(ctx, off, buf, n) bpf_xdp_load_bytes(ctx, off, buf, n)
#define hook_store_bytes(ctx, off, buf, n) bpf_xdp_store_bytes(ctx, off, buf, n)
#endif

/* Where both hooks run on one interface, XDP hands the datagrams whose
 * egress takes no XDP frames to TC with this mark in the packet metadata;
 * TC then handles only those (the rest XDP has judged and counted). */
#define HOOK_META_TO_TC 0xeb7c0001U

#endif
