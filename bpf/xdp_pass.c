// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* Passes every packet. Attached to the far end of a veth so that frames sent
 * with XDP_TX or XDP_REDIRECT into the veth are received (veth delivers XDP
 * frames only to a peer running NAPI, which an XDP program enables). */
#include "common.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}
