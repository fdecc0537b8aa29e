/* Shared includes and small macros for every ebrtc BPF program. */
#ifndef EBRTC_COMMON_H
#define EBRTC_COMMON_H

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define INLINE static __always_inline

/* bpf_map_lookup_elem on a map known at this call site. Clang merges
 * lookups in two branches (an IPv4 and an IPv6 map, say) into one call
 * with a variable map pointer, which the verifier cannot inline and the
 * kernel then reaches through the generic helper and an indirect call.
 * An asm statement of its own (tag) after each call keeps them apart. */
#define LOOKUP_AT(map, key, tag)                                                                    \
	({                                                                                          \
		void *__val = bpf_map_lookup_elem(map, key);                                        \
		asm volatile("/* " tag " */" : "+r"(__val));                                        \
		__val;                                                                              \
	})

#ifndef offsetof
#define offsetof(type, member) __builtin_offsetof(type, member)
#endif

#ifndef AF_INET
#define AF_INET 2
#endif
#ifndef AF_INET6
#define AF_INET6 10
#endif

/* An IPv4 or IPv6 address; IPv4 lives in the first word, the rest is zero. */
union ip_addr {
	__u8 bytes[16]; /* first, so generated Go code sees the whole address */
	__be32 v4;
	__be32 v6[4];
};

#endif
