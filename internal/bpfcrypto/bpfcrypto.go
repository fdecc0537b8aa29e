// Package bpfcrypto measures what the kernel's BPF crypto kfuncs
// (bpf_crypto_ctx_create, bpf_crypto_encrypt, bpf_crypto_decrypt) offer a
// TC program, for the question whether the SFU could en- or decrypt SRTP in
// its data plane. bpf/crypto_probe.c creates a context in a sleepable
// syscall program and keeps it in a map as a kptr; a TC program, run with
// BPF_PROG_TEST_RUN on a frame (a 14-byte Ethernet header, then the
// payload), en- or decrypts the payload with it. Nothing is attached.
package bpfcrypto

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"
)

const (
	// Slots is how many contexts an Engine holds at once.
	Slots = 16
	// PayloadMax is the longest payload crypto_run takes.
	PayloadMax = 2048
	// SIVMax is the most IV and state bytes a context may want.
	SIVMax = 64

	ethHdrLen = 14

	runDecrypt    = 1 << 0
	runInPlace    = 1 << 1
	runCTROverECB = 1 << 2
)

// Mode says what a run does with the payload.
type Mode struct {
	// Decrypt calls bpf_crypto_decrypt, not bpf_crypto_encrypt.
	Decrypt bool
	// InPlace writes the result over the payload in the packet (the SFU's
	// case), not into a buffer of the program's (crypto_bench.c's case).
	InPlace bool
	// CTROverECB makes AES-CTR of an "ecb(aes)" context: the payload's
	// counter blocks (IV + i, 128-bit big-endian) encrypted by one
	// bpf_crypto_encrypt, then XORed into the payload by the program.
	// Decrypt means nothing here (CTR's two directions are one).
	CTROverECB bool
}

func (m Mode) flags() uint32 {
	var f uint32
	if m.Decrypt {
		f |= runDecrypt
	}
	if m.InPlace {
		f |= runInPlace
	}
	if m.CTROverECB {
		f |= runCTROverECB
	}
	return f
}

// Engine is the loaded probe: its programs and its slots of contexts.
type Engine struct {
	mu   sync.Mutex // one run at a time: the run_* globals are shared
	objs cryptoObjects
	next uint32
}

// Open loads bpf/crypto_probe.c. It needs root (CAP_BPF, CAP_NET_ADMIN,
// CAP_SYS_ADMIN for the syscall program) and a kernel with the BPF crypto
// kfuncs (6.10 or later, built with CONFIG_CRYPTO_SKCIPHER).
func Open() (*Engine, error) {
	spec, err := loadCrypto()
	if err != nil {
		return nil, err
	}
	if err := tagKptr(spec); err != nil {
		return nil, err
	}
	e := &Engine{}
	if err := spec.LoadAndAssign(&e.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("load crypto probe: %+v", ve)
		}
		return nil, fmt.Errorf("load crypto probe: %w", err)
	}
	return e, nil
}

// tagKptr makes crypto_ctxs' ctx field a referenced kptr, as the kernel
// knows one: a pointer to a "kptr" type tag on struct bpf_crypto_ctx. The C
// source says so (btf_type_tag), but clang before 15 drops type tags from
// BTF; with a newer clang the tag is there and this does nothing.
func tagKptr(spec *ebpf.CollectionSpec) error {
	m := spec.Maps[cryptoMapCryptoCtxs]
	if m == nil {
		return fmt.Errorf("bpfcrypto: no map %s", cryptoMapCryptoCtxs)
	}
	slot, ok := m.Value.(*btf.Struct)
	if !ok || len(slot.Members) != 1 || slot.Members[0].Name != "ctx" {
		return fmt.Errorf("bpfcrypto: %s's value is %v, not struct crypto_slot", cryptoMapCryptoCtxs, m.Value)
	}
	ptr, ok := slot.Members[0].Type.(*btf.Pointer)
	if !ok {
		return fmt.Errorf("bpfcrypto: crypto_slot.ctx is %v, not a pointer", slot.Members[0].Type)
	}
	if tag, ok := ptr.Target.(*btf.TypeTag); ok && tag.Value == "kptr" {
		return nil
	}
	if s, ok := ptr.Target.(*btf.Struct); !ok || s.Name != "bpf_crypto_ctx" {
		return fmt.Errorf("bpfcrypto: crypto_slot.ctx points to %v, not struct bpf_crypto_ctx", ptr.Target)
	}
	ptr.Target = &btf.TypeTag{Type: ptr.Target, Value: "kptr"}
	return nil
}

// Close releases the programs and, with the map, every context.
func (e *Engine) Close() error { return e.objs.Close() }

// Context is a crypto context in one of an Engine's slots.
type Context struct {
	e    *Engine
	slot uint32
	// Type and Alg are what the context was created for.
	Type, Alg string
	// SIVLen is the IV and state size the context wants (the kernel's
	// ivsize + statesize: bpf_crypto_encrypt refuses any other), found by
	// trying each on one block.
	SIVLen int
}

// errno turns a program's return value (0 or -errno) into an error.
func errno(ret uint32) error {
	if r := int32(ret); r < 0 {
		return unix.Errno(-r)
	}
	return nil
}

// Create creates a context of type typ ("skcipher" is the only one the
// kernel registers) for algorithm alg and key with bpf_crypto_ctx_create,
// in the next free slot. authsize is an AEAD's tag length: the kernel
// refuses a non-zero one for a type without setauthsize. The error wraps
// the kernel's errno (unix.ENOENT: no such type; unix.EOPNOTSUPP: no such
// algorithm of the type, or authsize not for it; unix.EINVAL: bad key).
func (e *Engine) Create(typ, alg string, key []byte, authsize uint32) (*Context, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.next >= Slots {
		return nil, fmt.Errorf("bpfcrypto: all %d slots used", Slots)
	}
	var args cryptoCryptoSetupArgs
	if len(typ) >= len(args.Params.Type) || len(alg) >= len(args.Params.Algo) || len(key) > len(args.Params.Key) {
		return nil, fmt.Errorf("bpfcrypto: type %q, algorithm %q or %d-byte key too long", typ, alg, len(key))
	}
	for i := range len(typ) {
		args.Params.Type[i] = int8(typ[i])
	}
	for i := range len(alg) {
		args.Params.Algo[i] = int8(alg[i])
	}
	copy(args.Params.Key[:], key)
	args.Params.KeyLen = uint32(len(key))
	args.Params.Authsize = authsize
	args.Slot = e.next
	ret, err := e.objs.CryptoSetup.Run(&ebpf.RunOptions{Context: args})
	if err != nil {
		return nil, fmt.Errorf("bpfcrypto: run crypto_setup: %w", err)
	}
	if err := errno(ret); err != nil {
		return nil, fmt.Errorf("bpf_crypto_ctx_create(%q, %q, %d-byte key, authsize %d): %w", typ, alg, len(key), authsize, err)
	}
	c := &Context{e: e, slot: e.next, Type: typ, Alg: alg, SIVLen: -1}
	e.next++
	block := make([]byte, 16)
	for n := 0; n <= SIVMax; n++ {
		c.SIVLen = n
		if _, err := c.crypt(block, make([]byte, n), Mode{}); !errors.Is(err, unix.EINVAL) {
			return c, nil
		}
	}
	return nil, fmt.Errorf("bpfcrypto: %s: no IV size up to %d taken on a 16-byte payload", alg, SIVMax)
}

// set writes the run_* globals for one run of crypto_run.
func (c *Context) set(iv []byte, m Mode) error {
	if len(iv) > SIVMax {
		return fmt.Errorf("bpfcrypto: %d-byte IV, at most %d", len(iv), SIVMax)
	}
	if m.CTROverECB && len(iv) != 16 {
		return fmt.Errorf("bpfcrypto: CTR over ECB needs a 16-byte counter block, not %d bytes", len(iv))
	}
	var siv [SIVMax]byte
	copy(siv[:], iv)
	v := &c.e.objs.cryptoVariables
	sivLen := uint32(len(iv))
	if m.CTROverECB {
		sivLen = 0
	}
	for _, s := range []struct {
		v   *ebpf.Variable
		val any
	}{{v.RunSlot, c.slot}, {v.RunFlags, m.flags()}, {v.RunSivLen, sivLen}, {v.RunIv, siv}} {
		if err := s.v.Set(s.val); err != nil {
			return fmt.Errorf("bpfcrypto: set globals: %w", err)
		}
	}
	return nil
}

func frame(payload []byte) ([]byte, error) {
	if len(payload) == 0 || len(payload) > PayloadMax {
		return nil, fmt.Errorf("bpfcrypto: %d-byte payload, 1 to %d", len(payload), PayloadMax)
	}
	f := make([]byte, ethHdrLen+len(payload))
	f[12], f[13] = 0x88, 0xb5 // EtherType: local experimental
	copy(f[ethHdrLen:], payload)
	return f, nil
}

func (c *Context) crypt(payload, iv []byte, m Mode) ([]byte, error) {
	f, err := frame(payload)
	if err != nil {
		return nil, err
	}
	if err := c.set(iv, m); err != nil {
		return nil, err
	}
	out := make([]byte, len(f)+256)
	opts := &ebpf.RunOptions{Data: f, DataOut: out, Repeat: 1}
	ret, err := c.e.objs.CryptoRun.Run(opts)
	if err != nil {
		return nil, fmt.Errorf("bpfcrypto: run crypto_run: %w", err)
	}
	if err := errno(ret); err != nil {
		return nil, fmt.Errorf("bpfcrypto: %s (%+v): %w", c.Alg, m, err)
	}
	if m.InPlace {
		return opts.DataOut[ethHdrLen : ethHdrLen+len(payload)], nil
	}
	var buf [PayloadMax]byte
	if err := c.e.objs.RunOut.Get(&buf); err != nil {
		return nil, fmt.Errorf("bpfcrypto: read run_out: %w", err)
	}
	return buf[:len(payload)], nil
}

// Crypt en- or decrypts payload once with IV iv (SIVLen bytes; the kernel
// may update its copy, the next call starts from iv again) and returns the
// result.
func (c *Context) Crypt(payload, iv []byte, m Mode) ([]byte, error) {
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	return c.crypt(payload, iv, m)
}

// Bench runs crypto_run repeat times on one frame with BPF_PROG_TEST_RUN
// and returns the kernel's time per run (the whole program: context
// lookup, IV copy, dynptrs and the kfunc). In place, each run works on the
// previous one's result, with the IV the kernel left.
func (c *Context) Bench(payload, iv []byte, m Mode, repeat int) (time.Duration, error) {
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	if _, err := c.crypt(payload, iv, m); err != nil {
		return 0, err
	}
	f, err := frame(payload)
	if err != nil {
		return 0, err
	}
	ret, d, err := c.e.objs.CryptoRun.Benchmark(f, repeat, nil)
	if err != nil {
		return 0, fmt.Errorf("bpfcrypto: run crypto_run: %w", err)
	}
	if err := errno(ret); err != nil {
		return 0, fmt.Errorf("bpfcrypto: %s (%+v): %w", c.Alg, m, err)
	}
	return d, nil
}

// Probe reports whether a BPF program can create a context of type typ
// ("skcipher") for algorithm alg and key on this kernel: nil, or the
// error of Engine.Create (its errno says why not).
func Probe(typ, alg string, key []byte) error {
	e, err := Open()
	if err != nil {
		return err
	}
	defer e.Close()
	_, err = e.Create(typ, alg, key, 0)
	return err
}

// Run creates an "skcipher" context for alg and key and returns the time
// per run of encrypting (or decrypting) payload with iv in place, over
// repeat runs of one BPF_PROG_TEST_RUN.
func Run(alg string, key, iv, payload []byte, encrypt bool, repeat int) (time.Duration, error) {
	e, err := Open()
	if err != nil {
		return 0, err
	}
	defer e.Close()
	c, err := e.Create("skcipher", alg, key, 0)
	if err != nil {
		return 0, err
	}
	return c.Bench(payload, iv, Mode{Decrypt: !encrypt, InPlace: true}, repeat)
}
