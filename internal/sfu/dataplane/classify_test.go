package dataplane

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The user-space data plane and the eBPF one judge every payload alike:
// the same outcome, and the same SSRC replicated. Hand-made edge cases,
// then random mutations of valid RTP and RTCP.
func TestClassifyAgreesWithBPF(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	// Every SSRC the mutations can produce would be unknown: a known one
	// shows as a redirect, so install the ones of the seeds.
	testenv.Must(t, r.dp.SetStream(from, audio(0x1234abcd), r.receivers(false, 1)))
	seeds := [][]byte{rtpPacket(0x1234abcd, 1, 30), senderSR(0x1234abcd), {0x81, 205, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1},
		{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42}, {0xa0, 96, 0, 1, 0, 0, 0, 1, 0x12, 0x34, 0xab, 0xcd, 9, 9, 9, 3}}
	rng := rand.New(rand.NewPCG(9, 10))
	var inputs [][]byte
	for _, s := range seeds {
		inputs = append(inputs, s)
		for range 150 {
			m := append([]byte(nil), s...)
			switch rng.IntN(4) {
			case 0:
				m[rng.IntN(len(m))] ^= byte(1 << rng.IntN(8))
			case 1:
				m = m[:rng.IntN(len(m)+1)]
			case 2:
				m[0] = byte(rng.IntN(256))
			case 3:
				m = append(m, make([]byte, rng.IntN(9))...)
				m[len(m)-1] = byte(rng.IntN(256))
			}
			inputs = append(inputs, m)
		}
	}
	for _, p := range inputs {
		c := Classify(p)
		want, ssrc, replicate := c.Outcome, c.SSRC, c.Replicate
		in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: p}.Marshal()
		before := r.outcomes()
		ret := r.verdict(in)
		after := r.outcomes()
		var got []Outcome
		for o := range after {
			if after[o].Packets != before[o].Packets {
				got = append(got, o)
			}
		}
		switch {
		case replicate && ssrc == 0x1234abcd:
			if ret != tcActRedirect {
				t.Errorf("% x: Go replicates, BPF verdict %d (%v)", p, ret, got)
			}
		case replicate:
			if len(got) != 1 || got[0] != UnknownSender {
				t.Errorf("% x: Go replicates SSRC %#x (unknown), BPF counted %v", p, ssrc, got)
			}
		default:
			if len(got) != 1 || got[0] != want {
				t.Errorf("% x: Go says %v, BPF counted %v", p, want, got)
			}
		}
	}
}
