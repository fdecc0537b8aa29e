/* STUN (RFC 8489) parsing for the TURN control snooper: the fixed header,
 * then the attributes walked with a fixed bound. Everything is read with
 * constant-size loads at checked offsets; a message that is malformed or
 * longer than the bound is simply not learned (the server still handles it). */
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

#define STUN_MAX_ATTRS 16
#define STUN_ATTR_CHANNEL_NUMBER 0x000C
#define STUN_ATTR_LIFETIME 0x000D
#define STUN_ATTR_XOR_PEER_ADDRESS 0x0012
#define STUN_ATTR_XOR_RELAYED_ADDRESS 0x0016

/* STUN_WALK_ATTRS walks the attributes of a message that start at packet
 * offset start and span len bytes, with load(ctx, off, buf, n) reading n
 * constant bytes (bpf_xdp_load_bytes or bpf_skb_load_bytes). It fills ev and
 * evaluates to 0, or to -1 when an attribute runs past the message or the
 * message has more than STUN_MAX_ATTRS attributes. */
#define STUN_WALK_ATTRS(load, ctx, start, len, ev)                                        \
	({                                                                                   \
		__u32 __off = 0;                                                             \
		int __rc = -1;                                                               \
		for (int __i = 0; __i < STUN_MAX_ATTRS + 1; __i++) {                        \
			__be16 __hdr[2];                                                     \
			__u16 __type, __alen;                                                \
			__u32 __v;                                                           \
			if (__off == (len)) {                                                \
				__rc = 0;                                                    \
				break;                                                       \
			}                                                                    \
			if (__i == STUN_MAX_ATTRS || __off + 4 > (len))                      \
				break;                                                       \
			if (load(ctx, ((start) + __off) & 0xffff, __hdr, 4))                 \
				break;                                                       \
			__type = bpf_ntohs(__hdr[0]);                                        \
			__alen = bpf_ntohs(__hdr[1]);                                        \
			if (__alen > (len) - __off - 4)                                      \
				break;                                                       \
			__v = ((start) + __off + 4) & 0xffff;                                \
			if (stun_attr(load, ctx, __v, __type, __alen, ev))                   \
				break;                                                       \
			__off += 4 + ((__alen + 3) & ~3);                                    \
		}                                                                            \
		__rc;                                                                        \
	})

/* stun_attr reads one attribute of interest into ev; -1 on a short read. */
#define stun_attr(load, ctx, voff, type, alen, ev)                                        \
	({                                                                                   \
		int __r = 0;                                                                 \
		__u8 __val[20] = {};                                                         \
		if (((type) == STUN_ATTR_CHANNEL_NUMBER || (type) == STUN_ATTR_LIFETIME) &&  \
		    (alen) == 4) {                                                           \
			__r = load(ctx, voff, __val, 4);                                     \
			if (!__r && (type) == STUN_ATTR_CHANNEL_NUMBER) {                    \
				(ev)->channel = ((__u16)__val[0] << 8) | __val[1];           \
				(ev)->flags |= SNOOP_HAS_CHANNEL;                            \
			} else if (!__r) {                                                   \
				(ev)->lifetime = ((__u32)__val[0] << 24) |                   \
						 ((__u32)__val[1] << 16) |                   \
						 ((__u32)__val[2] << 8) | __val[3];           \
				(ev)->flags |= SNOOP_HAS_LIFETIME;                           \
			}                                                                    \
		} else if (((type) == STUN_ATTR_XOR_PEER_ADDRESS ||                          \
			    (type) == STUN_ATTR_XOR_RELAYED_ADDRESS) &&                      \
			   ((alen) == 8 || (alen) == 20)) {                                  \
			if ((alen) == 8)                                                     \
				__r = load(ctx, voff, __val, 8);                             \
			else                                                                 \
				__r = load(ctx, voff, __val, 20);                            \
			if (!__r) {                                                          \
				(ev)->xor_family = __val[1];                                 \
				__builtin_memcpy(&(ev)->xor_port, &__val[2], 2);             \
				__builtin_memcpy((ev)->xor_addr, &__val[4], 16);             \
				(ev)->flags |= SNOOP_HAS_ADDRESS;                            \
			}                                                                    \
		}                                                                            \
		__r;                                                                         \
	})

#endif
