package afxdp

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// referenceSum is RFC 1071's sum, 16 bits at a time in memory order,
// folded as it goes.
func referenceSum(b []byte, sum uint16) uint16 {
	s := uint32(sum)
	for i := 0; i < len(b); i += 2 {
		var w [2]byte
		copy(w[:], b[i:])
		s += uint32(binary.NativeEndian.Uint16(w[:]))
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// sumNative's wide words fold to RFC 1071's 16-bit sum: random bytes of
// every length up to a jumbo frame, after random partial sums, and the
// words that carry the most (all ones) or none (zeros).
func TestSumNativeIsTheInternetChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 9000)
	for _, fill := range []func(){
		func() {
			for i := range buf {
				buf[i] = byte(rng.Uint32())
			}
		},
		func() { copy(buf, bytes.Repeat([]byte{0xff}, len(buf))) },
		func() { clear(buf) },
		func() { // 0x8000... words: each 64-bit add carries out
			for i := range buf {
				buf[i] = map[bool]byte{true: 0x80, false: 0}[i%8 == 7]
			}
		},
	} {
		fill()
		for n := range 1600 {
			start := uint16(rng.Uint32())
			if n%7 == 0 {
				start = 0
			}
			got, want := fold(sumNative(buf[:n], uint64(start))), referenceSum(buf[:n], start)
			if got != want {
				t.Fatalf("%d bytes from %#x (first %x): %#04x, want %#04x", n, start, buf[:min(n, 8)], got, want)
			}
		}
		if got, want := fold(sumNative(buf, 0)), referenceSum(buf, 0); got != want {
			t.Fatalf("9000 bytes: %#04x, want %#04x", got, want)
		}
	}
}

func BenchmarkSumNative1100(b *testing.B) {
	p := make([]byte, 1100)
	for i := range p {
		p[i] = byte(i * 7)
	}
	b.SetBytes(int64(len(p)))
	var s uint64
	for b.Loop() {
		s += sumNative(p, s&0xffff)
	}
	_ = s
}
