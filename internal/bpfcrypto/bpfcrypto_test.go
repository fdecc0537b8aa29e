package bpfcrypto

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha1"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// srtpPacket is the payload size the findings are about: a 1,100-byte
// packet; block modes (ECB, CBC) take whole 16-byte blocks, so they get
// blockPacket bytes.
const (
	srtpPacket  = 1100
	blockPacket = 1104
)

var (
	testKey = []byte{0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f}
	testIV  = []byte{0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff}
	// An SRTP AES-CM counter block (RFC 3711 4.1.1: salt XOR SSRC and
	// index, the low 16 bits zero) and one whose 69 blocks carry out of
	// the low 64 bits.
	srtpIV  = []byte{0x0e, 0x1d, 0x2c, 0x3b, 0x4a, 0x59, 0x68, 0x77, 0x86, 0x95, 0xa4, 0xb3, 0xc2, 0xd1, 0x00, 0x00}
	carryIV = []byte{0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xe0}
)

func testPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7 + 3)
	}
	return p
}

// open needs root and a kernel with the BPF crypto kfuncs, and loads the
// probe.
func open(tb testing.TB) *Engine {
	tb.Helper()
	testenv.RequireRoot(tb)
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		testenv.Missing(tb, "kernel BTF: %v", err)
	}
	var fn *btf.Func
	if err := spec.TypeByName("bpf_crypto_encrypt", &fn); err != nil {
		testenv.Missing(tb, "kernel without the BPF crypto kfuncs (6.10+, CONFIG_CRYPTO_SKCIPHER): %v", err)
	}
	e, err := Open()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { e.Close() })
	return e
}

// probe is one attempt of bpf_crypto_ctx_create.
type probe struct {
	typ, alg string
	keyLen   int
	authsize uint32
}

var probes = []probe{
	{"skcipher", "ecb(aes)", 16, 0},
	{"skcipher", "ecb(aes)", 16, 16},
	{"skcipher", "cbc(aes)", 16, 0},
	{"skcipher", "ctr(aes)", 16, 0},
	{"skcipher", "rfc3686(ctr(aes))", 20, 0},
	{"skcipher", "xts(aes)", 32, 0},
	{"skcipher", "chacha20", 32, 0},
	{"skcipher", "gcm(aes)", 16, 0},
	{"skcipher", "gcm(aes)", 16, 16},
	{"skcipher", "rfc4106(gcm(aes))", 20, 16},
	{"skcipher", "cbc(des)", 8, 0},
	{"skcipher", "aes", 16, 0},
	{"skcipher", "ecb(aes-generic)", 16, 0},
	{"skcipher", "cbc(aes-generic)", 16, 0},
	{"skcipher", "ecb(cipher_null)", 16, 0},
	{"skcipher", "hmac(sha1)", 20, 0},
	{"lskcipher", "ecb(aes)", 16, 0},
	{"aead", "gcm(aes)", 16, 16},
	{"aead", "rfc4106(gcm(aes))", 20, 16},
	{"hash", "hmac(sha1)", 20, 0},
	{"shash", "hmac(sha1)", 20, 0},
	{"ahash", "hmac(sha1)", 20, 0},
	{"akcipher", "rsa", 16, 0},
}

func errName(err error) string {
	var en unix.Errno
	if errors.As(err, &en) {
		name := unix.ErrnoName(en)
		if en == unix.EOPNOTSUPP {
			name = "EOPNOTSUPP" // = ENOTSUP on Linux
		}
		return fmt.Sprintf("-%s (%v)", name, en)
	}
	return err.Error()
}

// TestProbe tries each type and algorithm and logs what the kernel says
// (go test -v -run TestProbe: the findings' first table). It asserts only
// what kernel/bpf/crypto.c itself decides, not what this kernel's
// configuration offers.
func TestProbe(t *testing.T) {
	e := open(t)
	var tab strings.Builder
	fmt.Fprintf(&tab, "\n| type | algorithm | key | authsize | result |\n|---|---|---|---|---|\n")
	for _, p := range probes {
		key := testPayload(p.keyLen) // not all zero: XTS refuses equal halves
		c, err := e.Create(p.typ, p.alg, key, p.authsize)
		res := "works"
		if err != nil {
			res = errName(err)
		} else {
			res = fmt.Sprintf("works (IV+state %d bytes)", c.SIVLen)
		}
		fmt.Fprintf(&tab, "| %s | %s | %d | %d | %s |\n", p.typ, p.alg, p.keyLen, p.authsize, res)
	}
	t.Log(tab.String())

	if _, err := e.Create("no-such-type", "ecb(aes)", testKey, 0); !errors.Is(err, unix.ENOENT) {
		t.Errorf("unknown type: %v, want ENOENT", err)
	}
	if _, err := e.Create("skcipher", "no-such-algorithm", testKey, 0); !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("unknown algorithm: %v, want EOPNOTSUPP", err)
	}
	if _, err := e.Create("skcipher", "ecb(aes)", testKey, 16); !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) {
		t.Errorf("authsize for a cipher without tags: %v, want EOPNOTSUPP (or EINVAL)", err)
	}
}

// goECB is AES-ECB in Go, block by block.
func goECB(key, in []byte, decrypt bool) []byte {
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	out := make([]byte, len(in))
	for i := 0; i < len(in); i += aes.BlockSize {
		if decrypt {
			b.Decrypt(out[i:], in[i:])
		} else {
			b.Encrypt(out[i:], in[i:])
		}
	}
	return out
}

func goCBC(key, iv, in []byte, decrypt bool) []byte {
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	out := make([]byte, len(in))
	if decrypt {
		cipher.NewCBCDecrypter(b, iv).CryptBlocks(out, in)
	} else {
		cipher.NewCBCEncrypter(b, iv).CryptBlocks(out, in)
	}
	return out
}

func goCTR(key, iv, in []byte) []byte {
	b, err := aes.NewCipher(key)
	if err != nil {
		panic(err)
	}
	out := make([]byte, len(in))
	cipher.NewCTR(b, iv).XORKeyStream(out, in)
	return out
}

// check compares the probe's result with Go's: a mismatch fails the test.
func check(t *testing.T, what string, got, want, plain []byte) {
	t.Helper()
	if bytes.Equal(want, plain) {
		t.Fatalf("%s: Go's reference equals the plaintext", what)
	}
	if !bytes.Equal(got, want) {
		n := 0
		for n < len(got) && n < len(want) && got[n] == want[n] {
			n++
		}
		t.Errorf("%s: BPF result differs from Go's from byte %d of %d:\n got % x\nwant % x", what, n, len(want), got[:min(len(got), 32)], want[:min(len(want), 32)])
	}
}

// TestMatchesGo en- and decrypts a known payload in the kernel, in a buffer
// and in place, and compares it with Go's crypto/aes.
func TestMatchesGo(t *testing.T) {
	e := open(t)
	block := testPayload(blockPacket)
	pkt := testPayload(srtpPacket)
	modes := []Mode{{}, {InPlace: true}}

	for _, alg := range []string{"ecb(aes)", "cbc(aes)"} {
		c, err := e.Create("skcipher", alg, testKey, 0)
		if err != nil {
			testenv.Missing(t, "%s: %v", alg, err)
		}
		var iv, ct, pt []byte
		if strings.HasPrefix(alg, "cbc") {
			iv = testIV
			ct, pt = goCBC(testKey, iv, block, false), goCBC(testKey, iv, block, true)
		} else {
			ct, pt = goECB(testKey, block, false), goECB(testKey, block, true)
		}
		if c.SIVLen != len(iv) {
			t.Fatalf("%s: IV+state %d bytes, want %d", alg, c.SIVLen, len(iv))
		}
		for _, m := range modes {
			got, err := c.Crypt(block, iv, m)
			if err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("%s encrypt %+v", alg, m), got, ct, block)
			back, err := c.Crypt(got, iv, Mode{Decrypt: true, InPlace: m.InPlace})
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back, block) {
				t.Errorf("%s %+v: decrypting the ciphertext does not give the plaintext back", alg, m)
			}
			m.Decrypt = true
			got, err = c.Crypt(block, iv, m)
			if err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("%s decrypt %+v", alg, m), got, pt, block)
		}
		// Not whole blocks: the kernel refuses rather than pads.
		if _, err := c.Crypt(pkt, iv, Mode{}); !errors.Is(err, unix.EINVAL) {
			t.Errorf("%s on %d bytes: %v, want EINVAL", alg, len(pkt), err)
		}
	}

	// SRTP's AES-CM: AES-CTR of the ECB context, on the 1,100 bytes.
	c, err := e.Create("skcipher", "ecb(aes)", testKey, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, iv := range [][]byte{srtpIV, carryIV} {
		want := goCTR(testKey, iv, pkt)
		for _, m := range modes {
			m.CTROverECB = true
			got, err := c.Crypt(pkt, iv, m)
			if err != nil {
				t.Fatal(err)
			}
			check(t, fmt.Sprintf("CTR over ecb(aes) IV % x %+v", iv, m), got, want, pkt)
		}
	}

	// The kernel's own ctr(aes), where a kernel offers it as an lskcipher.
	if c, err := e.Create("skcipher", "ctr(aes)", testKey, 0); err != nil {
		t.Logf("ctr(aes): %s", errName(err))
	} else {
		got, err := c.Crypt(pkt, srtpIV[:c.SIVLen], Mode{})
		if err != nil {
			t.Fatal(err)
		}
		check(t, "ctr(aes)", got, goCTR(testKey, srtpIV, pkt), pkt)
	}
}

// TestCheckCatchesWrongKey makes sure the comparison is no formality: a
// context with another key must not match Go's result for testKey.
func TestCheckCatchesWrongKey(t *testing.T) {
	e := open(t)
	other := bytes.Clone(testKey)
	other[0] ^= 1
	c, err := e.Create("skcipher", "ecb(aes)", other, 0)
	if err != nil {
		testenv.Missing(t, "ecb(aes): %v", err)
	}
	block := testPayload(blockPacket)
	got, err := c.Crypt(block, nil, Mode{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, goECB(testKey, block, false)) {
		t.Fatal("ciphertexts of two keys match")
	}
	if !bytes.Equal(got, goECB(other, block, false)) {
		t.Fatal("ciphertext differs from Go's for the same key")
	}
}

func benchName(alg string) string {
	return strings.NewReplacer("(", "-", ")", "").Replace(alg)
}

// BenchmarkBPFCrypto: ns per packet (ns/pkt: for BPF the kernel's own time
// per BPF_PROG_TEST_RUN repetition of the whole TC program) of the kernel's
// BPF crypto and of Go's crypto/aes, on a 1,100-byte payload (1,104 for
// the block modes).
func BenchmarkBPFCrypto(b *testing.B) {
	e := open(b)
	bpf := func(b *testing.B, c *Context, payload, iv []byte, m Mode) {
		b.SetBytes(int64(len(payload)))
		b.ResetTimer()
		d, err := c.Bench(payload, iv, m, b.N)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(d.Nanoseconds()), "ns/pkt")
	}
	for _, alg := range []string{"ecb(aes)", "cbc(aes)", "ecb(aes-generic)", "cbc(aes-generic)"} {
		c, err := e.Create("skcipher", alg, testKey, 0)
		if err != nil {
			b.Logf("%s: %v", alg, err)
			continue
		}
		iv := testIV[:c.SIVLen]
		for _, dir := range []string{"encrypt", "decrypt"} {
			for _, m := range []Mode{{InPlace: true}, {}} {
				m.Decrypt = dir == "decrypt"
				where := "inplace"
				if !m.InPlace {
					where = "buffer"
				}
				b.Run(fmt.Sprintf("BPF/%s/%s/%s/%d", benchName(alg), dir, where, blockPacket), func(b *testing.B) {
					bpf(b, c, testPayload(blockPacket), iv, m)
				})
			}
		}
		if strings.HasPrefix(alg, "ecb") {
			// The fixed cost of a call: one block.
			b.Run(fmt.Sprintf("BPF/%s/encrypt/inplace/16", benchName(alg)), func(b *testing.B) {
				bpf(b, c, testPayload(16), nil, Mode{InPlace: true})
			})
			// AES-CM (SRTP's AES_CM_128): counter blocks, one ECB call, XOR.
			b.Run(fmt.Sprintf("BPF/ctr-over-%s/encrypt/inplace/%d", benchName(alg), srtpPacket), func(b *testing.B) {
				bpf(b, c, testPayload(srtpPacket), srtpIV, Mode{InPlace: true, CTROverECB: true})
			})
		}
	}

	blk, err := aes.NewCipher(testKey)
	if err != nil {
		b.Fatal(err)
	}
	goBench := func(name string, n int, f func(buf []byte)) {
		b.Run(fmt.Sprintf("Go/%s/%d", name, n), func(b *testing.B) {
			buf := testPayload(n)
			b.SetBytes(int64(n))
			b.ResetTimer()
			for b.Loop() {
				f(buf)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/pkt")
		})
	}
	goBench("ctr-aes/encrypt", srtpPacket, func(buf []byte) {
		cipher.NewCTR(blk, srtpIV).XORKeyStream(buf, buf)
	})
	goBench("cbc-aes/encrypt", blockPacket, func(buf []byte) {
		cipher.NewCBCEncrypter(blk, testIV).CryptBlocks(buf, buf)
	})
	goBench("cbc-aes/decrypt", blockPacket, func(buf []byte) {
		cipher.NewCBCDecrypter(blk, testIV).CryptBlocks(buf, buf)
	})
	gcm, err := cipher.NewGCM(blk)
	if err != nil {
		b.Fatal(err)
	}
	nonce := srtpIV[:12]
	aad := testPayload(12) // an RTP header
	sealed := gcm.Seal(nil, nonce, testPayload(srtpPacket), aad)
	out := make([]byte, 0, srtpPacket+gcm.Overhead())
	goBench("gcm-aes/seal", srtpPacket, func(buf []byte) {
		out = gcm.Seal(out[:0], nonce, buf, aad)
	})
	goBench("gcm-aes/open", srtpPacket, func([]byte) {
		if _, err := gcm.Open(out[:0], nonce, sealed, aad); err != nil {
			b.Fatal(err)
		}
	})
	// SRTP's other half of AES_CM_128_HMAC_SHA1_80: the tag over header
	// and payload (and the 4-byte ROC), truncated to 80 bits.
	mac := hmac.New(sha1.New, testPayload(20))
	tag := make([]byte, 0, sha1.Size)
	goBench("hmac-sha1-80", srtpPacket, func(buf []byte) {
		mac.Reset()
		mac.Write(aad)
		mac.Write(buf)
		mac.Write([]byte{0, 0, 0, 1})
		tag = mac.Sum(tag[:0])[:10]
	})
}

// TestProbeAndRun covers the package's one-call functions.
func TestProbeAndRun(t *testing.T) {
	open(t)
	if err := Probe("skcipher", "ecb(aes)", testKey); err != nil {
		t.Fatalf("ecb(aes): %v", err)
	}
	if err := Probe("no-such-type", "ecb(aes)", testKey); !errors.Is(err, unix.ENOENT) {
		t.Errorf("unknown type: %v, want ENOENT", err)
	}
	for _, encrypt := range []bool{true, false} {
		d, err := Run("cbc(aes)", testKey, testIV, testPayload(blockPacket), encrypt, 100)
		if err != nil {
			t.Fatal(err)
		}
		if d <= 0 {
			t.Errorf("cbc(aes) encrypt=%v: %v per packet", encrypt, d)
		}
		t.Logf("cbc(aes) encrypt=%v: %v per %d-byte packet", encrypt, d, blockPacket)
	}
}
