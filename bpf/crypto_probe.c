// SPDX-License-Identifier: (MIT OR GPL-2.0)
/* A probe of the kernel's BPF crypto kfuncs (kernel/bpf/crypto.c,
 * crypto/bpf_crypto_skcipher.c), for one question: could the SFU encrypt or
 * decrypt SRTP in its TC or XDP program? Never attached anywhere: user space
 * (package internal/bpfcrypto) runs both programs with BPF_PROG_TEST_RUN.
 *
 * crypto_setup, a syscall program (bpf_crypto_ctx_create may sleep, so
 * only a sleepable syscall program may call it), creates a context for a
 * type ("skcipher"), an algorithm and a key, and keeps it in a slot of
 * crypto_ctxs as a referenced kptr; it returns 0 or -errno.
 *
 * crypto_run, a TC program, en- or decrypts the frame's payload (all after
 * the 14-byte Ethernet header) with one slot's context, into run_out or in
 * place, and returns what bpf_crypto_encrypt/decrypt returned (0 or
 * -errno: this program's return value is no TC verdict). With
 * RUN_CTR_OVER_ECB it makes AES-CTR (SRTP's AES-CM) of an "ecb(aes)"
 * context: the payload's counter blocks encrypted in one call, then XORed
 * into the payload.
 */
#include "common.h"

/* The kfuncs need a GPL-compatible licence; this one is. */
char LICENSE[] SEC("license") = "Dual MIT/GPL";

#ifndef EINVAL
#define EINVAL 22
#endif
#ifndef ENOENT
#define ENOENT 2
#endif
#ifndef E2BIG
#define E2BIG 7
#endif

/* The kernel's struct bpf_crypto_params (not UAPI): bpf_crypto_ctx_create
 * insists on exactly this size. */
struct bpf_crypto_params {
	char type[14];
	__u8 reserved[2];
	char algo[128];
	__u8 key[256];
	__u32 key_len;
	__u32 authsize;
};

/* Opaque to the program; the kernel resolves the kptr's type by name, and
 * only a struct (not a forward declaration) may be a kptr's target. */
struct bpf_crypto_ctx {
	int opaque;
};

extern struct bpf_crypto_ctx *bpf_crypto_ctx_create(const struct bpf_crypto_params *params,
						    __u32 params__sz, int *err) __ksym;
extern void bpf_crypto_ctx_release(struct bpf_crypto_ctx *ctx) __ksym;
extern int bpf_crypto_encrypt(struct bpf_crypto_ctx *ctx, const struct bpf_dynptr *src,
			      const struct bpf_dynptr *dst,
			      const struct bpf_dynptr *siv__nullable) __ksym;
extern int bpf_crypto_decrypt(struct bpf_crypto_ctx *ctx, const struct bpf_dynptr *src,
			      const struct bpf_dynptr *dst,
			      const struct bpf_dynptr *siv__nullable) __ksym;
extern int bpf_dynptr_from_skb(struct __sk_buff *skb, __u64 flags,
			       struct bpf_dynptr *ptr__uninit) __ksym;
extern int bpf_dynptr_adjust(const struct bpf_dynptr *p, __u32 start, __u32 end) __ksym;

#define CRYPTO_SLOTS 16
#define CRYPTO_SIV_MAX 64	 /* IV and state bytes a context may want */
#define CRYPTO_PAYLOAD_MAX 2048	 /* bytes after the Ethernet header */
#define CRYPTO_BLOCK 16		 /* AES */
#define CRYPTO_PAYLOAD_AT ETH_HLEN

/* A referenced kptr: the pointer's target must carry the "kptr" type tag.
 * Clang before 15 drops type tags from BTF; internal/bpfcrypto then adds
 * the tag to the map's value type before loading. */
struct crypto_slot {
	struct bpf_crypto_ctx __attribute__((btf_type_tag("kptr"))) *ctx;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CRYPTO_SLOTS);
	__type(key, __u32);
	__type(value, struct crypto_slot);
} crypto_ctxs SEC(".maps");

/* crypto_setup's context (BPF_PROG_TEST_RUN's ctx_in): params first, so
 * that the context itself is the kfunc's memory argument. */
struct crypto_setup_args {
	struct bpf_crypto_params params;
	__u32 slot;
};

SEC("syscall")
int crypto_setup(struct crypto_setup_args *args)
{
	struct bpf_crypto_ctx *cctx, *old;
	struct crypto_slot *s;
	__u32 slot = args->slot;
	int err = 0;

	cctx = bpf_crypto_ctx_create(&args->params, sizeof(args->params), &err);
	if (!cctx)
		return err ? err : -EINVAL;
	s = bpf_map_lookup_elem(&crypto_ctxs, &slot);
	if (!s) {
		bpf_crypto_ctx_release(cctx);
		return -E2BIG;
	}
	old = bpf_kptr_xchg(&s->ctx, cctx);
	if (old)
		bpf_crypto_ctx_release(old);
	return 0;
}

#define RUN_DECRYPT (1 << 0)
#define RUN_IN_PLACE (1 << 1)
#define RUN_CTR_OVER_ECB (1 << 2)

/* Set by user space before each run (one run at a time). */
__u32 run_slot;
__u32 run_flags;
__u32 run_siv_len;		    /* the context's IV + state size, exactly */
__u8 run_iv[CRYPTO_SIV_MAX];	    /* copied for each packet: the kfunc updates its copy */
__u8 run_siv[CRYPTO_SIV_MAX];	    /* run_iv's copy (map memory: no dynptr on the stack) */
__u8 run_out[CRYPTO_PAYLOAD_MAX];   /* the result, unless RUN_IN_PLACE */
__u8 run_stream[CRYPTO_PAYLOAD_MAX]; /* RUN_CTR_OVER_ECB's counter blocks, then key stream */

/* The 128-bit big-endian counter block iv + i, as Go's cipher.NewCTR and
 * RFC 3711's AES-CM count (the latter only in the low 16 bits). */
INLINE void ctr_block(__u64 *blk, __u64 hi, __u64 lo, __u32 i)
{
	__u64 n = lo + i;

	blk[0] = bpf_cpu_to_be64(hi + (n < lo));
	blk[1] = bpf_cpu_to_be64(n);
}

/* payload[0..len) ^= run_stream[0..len), into the packet or run_out. */
INLINE int xor_stream(struct __sk_buff *skb, __u32 len, int in_place)
{
	void *data = (void *)(long)skb->data;
	void *data_end = (void *)(long)skb->data_end;
	__u8 *p = data + CRYPTO_PAYLOAD_AT;
	__u32 i;

	for (i = 0; i + 8 <= len && i < CRYPTO_PAYLOAD_MAX; i += 8) {
		__u64 *w = (__u64 *)(p + i);
		__u64 v;

		if ((void *)(w + 1) > data_end)
			return -EINVAL;
		v = *w ^ *(__u64 *)&run_stream[i];
		if (in_place)
			*w = v;
		else
			*(__u64 *)&run_out[i] = v;
	}
	for (; i < len && i < CRYPTO_PAYLOAD_MAX; i++) {
		__u8 *b = p + i, v;

		if ((void *)(b + 1) > data_end)
			return -EINVAL;
		v = *b ^ run_stream[i];
		if (in_place)
			*b = v;
		else
			run_out[i] = v;
	}
	return 0;
}

/* AES-CTR of an ECB context: counter blocks for len bytes into run_stream,
 * encrypted there in place, then XORed into the payload. */
INLINE int ctr_over_ecb(struct __sk_buff *skb, struct bpf_crypto_ctx *ctx, __u32 len,
			int in_place)
{
	__u32 nblocks = (len + CRYPTO_BLOCK - 1) / CRYPTO_BLOCK, i;
	struct bpf_dynptr stream, iv;
	__u64 hi, lo;
	int err;

	hi = bpf_be64_to_cpu(*(__u64 *)&run_iv[0]);
	lo = bpf_be64_to_cpu(*(__u64 *)&run_iv[8]);
	for (i = 0; i < nblocks && i < CRYPTO_PAYLOAD_MAX / CRYPTO_BLOCK; i++)
		ctr_block((__u64 *)&run_stream[i * CRYPTO_BLOCK], hi, lo, i);

	i = nblocks * CRYPTO_BLOCK;
	asm volatile("" : "+r"(i)); /* keep clang from folding the bound into the rounding */
	if (i > CRYPTO_PAYLOAD_MAX)
		return -EINVAL;
	bpf_dynptr_from_mem(run_stream, i, 0, &stream);
	bpf_dynptr_from_mem(run_iv, 0, 0, &iv); /* ECB: no IV, a zero-sized one */
	err = bpf_crypto_encrypt(ctx, &stream, &stream, &iv);
	if (err)
		return err;
	return xor_stream(skb, len, in_place);
}

SEC("tc")
int crypto_run(struct __sk_buff *skb)
{
	__u32 slot = run_slot, flags = run_flags, siv_len = run_siv_len, len;
	struct bpf_dynptr pkt, buf, iv, *out = &pkt;
	struct bpf_crypto_ctx *ctx;
	struct crypto_slot *s;

	if (skb->len <= CRYPTO_PAYLOAD_AT || skb->len - CRYPTO_PAYLOAD_AT > CRYPTO_PAYLOAD_MAX)
		return -EINVAL;
	len = skb->len - CRYPTO_PAYLOAD_AT;
	if (siv_len > CRYPTO_SIV_MAX)
		return -EINVAL;

	s = bpf_map_lookup_elem(&crypto_ctxs, &slot);
	if (!s)
		return -ENOENT;
	ctx = s->ctx; /* RCU-protected: the program runs under rcu_read_lock */
	if (!ctx)
		return -ENOENT;

	if (flags & RUN_CTR_OVER_ECB)
		return ctr_over_ecb(skb, ctx, len, flags & RUN_IN_PLACE);

	__builtin_memcpy(run_siv, run_iv, sizeof(run_siv));
	bpf_dynptr_from_mem(run_siv, siv_len, 0, &iv);
	bpf_dynptr_from_skb(skb, 0, &pkt);
	if (bpf_dynptr_adjust(&pkt, CRYPTO_PAYLOAD_AT, skb->len))
		return -EINVAL;
	if (!(flags & RUN_IN_PLACE)) {
		bpf_dynptr_from_mem(run_out, len, 0, &buf);
		out = &buf;
	}

	if (flags & RUN_DECRYPT)
		return bpf_crypto_decrypt(ctx, &pkt, out, &iv);
	return bpf_crypto_encrypt(ctx, &pkt, out, &iv);
}
