// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* XDP frames a device of ours did not take (bpf/turn_offload.c sends
 * them): tracepoints on the kernel's XDP transmit paths, sharing the fast
 * path's maps (internal/offload loads them onto the XDP object's). */
#include "common.h"
#include "turn.h"
#include "outcome.h"
#include "hook.h"
#include "turn_maps.h"
#include "turn_path.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct net_device {
	int ifindex;
} __attribute__((preserve_access_index));

#define ENXIO 6
#define EOPNOTSUPP 95

/* Frames sent from XDP that a device of ours did not take are counted. If
 * the device takes no XDP frames at all (a veth whose peer runs no XDP:
 * ENXIO; no XDP transmit: EOPNOTSUPP), it stops being an XDP egress at once,
 * so the next datagrams go to TC (or the kernel where no TC runs) rather
 * than into the same hole. A full ring or a link going down only counts. */
/* Charge n refused frames of kind k to the interface's directions. */
INLINE void charge(struct iface_info *info, int k, __u32 n)
{
	if (!n)
		return;
	if (k != OUT_FAST_PEER_TO_CLIENT)
		__sync_fetch_and_add(&info->failed_to_peer, n);
	if (k != OUT_FAST_CLIENT_TO_PEER)
		__sync_fetch_and_add(&info->failed_to_client, n);
}

/* Split drops over the kinds pending on this CPU: all of them when the
 * whole queue failed (a device that takes no XDP frames), in proportion
 * otherwise, the rounding going to the latest kind. */
INLINE void attribute(struct iface_info *info, struct xmit_pending *p, __u32 drops)
{
	__u32 total = p->kinds[0] + p->kinds[1] + p->kinds[2], left = drops, n;

	if (!total)
		return; /* not ours: another program's frames */
#pragma unroll
	for (int k = 0; k < 3; k++) {
		n = drops >= total ? p->kinds[k] : (__u32)((__u64)drops * p->kinds[k] / total);
		n = n < left ? n : left;
		charge(info, k, n);
		left -= n;
	}
	if (left && drops < total)
		charge(info, p->last & 3, left);
}

/* Frames sent from XDP that a device of ours did not take are counted. If
 * the device takes no XDP frames at all (a veth whose peer runs no XDP:
 * ENXIO; no XDP transmit: EOPNOTSUPP), it stops being an XDP egress at once,
 * so the next datagrams go to TC (or the kernel where no TC runs) rather
 * than into the same hole. A full ring or a link going down only counts.
 * flushed: the device's queue on this CPU went out (pending starts afresh). */
INLINE void xmit_failed(__u32 ifindex, int drops, int err, int flushed)
{
	__u32 out = OUT_DROP_XMIT_FAILED;
	struct iface_info *info = iface_of(ifindex);
	struct xmit_pending *p;
	struct outcome_stats *s;

	if (!registered(info))
		return;
	p = pending_of(info->slot);
	if (drops > 0) {
		if ((err == -ENXIO || err == -EOPNOTSUPP) && (info->flags & IFACE_F_XDP_EGRESS)) {
			__sync_fetch_and_and(&info->flags, ~IFACE_F_XDP_EGRESS);
			bump_iface_gen();
		}
		__sync_fetch_and_add(&info->xmit_failures, drops);
		s = bpf_map_lookup_elem(&outcomes, &out);
		if (s)
			s->packets += drops;
		if (p)
			attribute(info, p, drops);
	}
	if (p && flushed) {
		p->kinds[0] = p->kinds[1] = p->kinds[2] = 0;
	} else if (p && drops > 0) {
		/* One frame refused at once: the latest. */
		__u32 k = p->last & 3;

		if (k < 3 && p->kinds[k])
			p->kinds[k]--;
	}
}

/* XDP_TX batches a driver could not send (a veth whose peer runs no XDP). */
SEC("tp_btf/xdp_bulk_tx")
int xdp_bulk_tx_failed(__u64 *ctx)
{
	xmit_failed(((const struct net_device *)ctx[0])->ifindex, (int)ctx[2], (int)ctx[3], 1);
	return 0;
}

/* An XDP_TX a driver refused at once. */
SEC("tp_btf/xdp_exception")
int xdp_tx_exception(__u64 *ctx)
{
	if ((__u32)ctx[2] == XDP_TX)
		xmit_failed(((const struct net_device *)ctx[0])->ifindex, 1, 0, 0);
	return 0;
}

/* A redirect refused when it was made (a target without XDP transmit);
 * for egress_ports the index is the target's ifindex. */
SEC("tp_btf/xdp_redirect_err")
int xdp_redirect_failed(__u64 *ctx)
{
	if ((__u32)ctx[4] == BPF_MAP_TYPE_DEVMAP_HASH)
		xmit_failed((__u32)ctx[6], 1, (int)ctx[3], 0);
	return 0;
}

/* Redirect batches the target device refused. */
SEC("tp_btf/xdp_devmap_xmit")
int xdp_devmap_xmit_failed(__u64 *ctx)
{
	xmit_failed(((const struct net_device *)ctx[1])->ifindex, (int)ctx[3], (int)ctx[4], 1);
	return 0;
}
