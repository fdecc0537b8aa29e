/* STUN message recognition for the TURN control snooper: only the fixed
 * 20-byte header is read in BPF; attributes are parsed in user space. */
#ifndef EBRTC_STUN_H
#define EBRTC_STUN_H

#include "common.h"
#include "turn.h"

#define STUN_CLASS_MASK 0x0110
#define STUN_CLASS_REQUEST 0x0000
#define STUN_CLASS_SUCCESS 0x0100
#define STUN_CLASS_ERROR 0x0110

/* The TURN methods whose exchanges say what may be offloaded. */
INLINE int stun_turn_method(__u16 type)
{
	__u16 method = (type & 0x000f) | ((type & 0x00e0) >> 1) | ((type & 0x3e00) >> 2);

	switch (method) {
	case 0x003: /* Allocate */
	case 0x004: /* Refresh */
	case 0x008: /* CreatePermission */
	case 0x009: /* ChannelBind */
		return 1;
	}
	return 0;
}

/* Whether the UDP payload at hdr is a TURN control message of one of the
 * classes in want (a request, or a success or error response). */
INLINE int stun_is_turn_control(const struct stun_hdr *hdr, void *data_end, __u32 payload_len, int responses)
{
	__u16 type, class;

	if (payload_len < STUN_HDR_LEN || (void *)(hdr + 1) > data_end)
		return 0;
	type = bpf_ntohs(hdr->type);
	if (type & 0xc000 || hdr->cookie != bpf_htonl(STUN_MAGIC_COOKIE))
		return 0;
	if (bpf_ntohs(hdr->len) + STUN_HDR_LEN != payload_len)
		return 0;
	class = type & STUN_CLASS_MASK;
	if (responses ? class == STUN_CLASS_REQUEST || class == 0x0010 : class != STUN_CLASS_REQUEST)
		return 0;
	return stun_turn_method(type);
}

#endif
