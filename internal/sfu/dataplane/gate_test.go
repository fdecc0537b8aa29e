package dataplane

import (
	"encoding/binary"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// rtpWith is an RTP packet (no CSRCs, no extension) with this payload.
func rtpWith(ssrc uint32, seq uint16, payload []byte) []byte {
	p := []byte{0x80, 96}
	p = binary.BigEndian.AppendUint16(p, seq)
	p = binary.BigEndian.AppendUint32(p, 90000)
	p = binary.BigEndian.AppendUint32(p, ssrc)
	return append(p, payload...)
}

// Payloads of each codec that start a key frame, and ones that do not.
var keyFrames = []struct {
	codec    Codec
	key, not [][]byte
}{
	{AV1, [][]byte{{0x18, 0x0a, 0x0b, 0, 0, 0, 0, 0}}, // N, W=1
		[][]byte{{0x10, 0x32, 1, 2, 3, 4, 5, 6}, {0x08, 1, 2}}}, // W=1 only; N but too short
	{VP8, [][]byte{{0x10, 0x50, 0x01, 0x00, 0x9d, 0x01, 0x2a, 0}, // S, PID 0; P clear
		{0x90, 0xe0, 0x81, 0x23, 0x05, 0x10, 0, 0}}, // X: I (15-bit), L, T: header at 6
		[][]byte{{0x10, 0x01, 1, 0, 0, 0, 0, 0}, // P set: an inter frame
			{0x00, 0x00, 0, 0, 0, 0, 0, 0},                  // not the start (S clear)
			{0x11, 0x00, 0, 0, 0, 0, 0, 0},                  // partition 1
			{0x90, 0xe0, 0x81, 0x23, 0x05, 0x10, 0x01, 0}}}, // header at 6 with P set
	{VP9, [][]byte{{0x08, 0, 0, 0, 0, 0, 0, 0}, {0xa8, 0x81, 0x02, 0x00, 0, 0, 0, 0}}, // B; I 15-bit, L, SID 0
		[][]byte{{0x48, 0, 0, 0, 0, 0, 0, 0}, {0x00, 0, 0, 0, 0, 0, 0, 0}, {0xa8, 0x01, 0x02, 0, 0, 0, 0, 0}}}, // P; no B; SID 1
	{H264, [][]byte{{0x67, 0x42, 0, 0, 0, 0, 0, 0}, {0x78, 0x00, 0x10, 0x67, 0, 0, 0, 0}}, // SPS; STAP-A with an SPS first
		[][]byte{{0x65, 0, 0, 0, 0, 0, 0, 0}, {0x7c, 0x85, 0, 0, 0, 0, 0, 0}, {0x61, 0, 0, 0, 0, 0, 0, 0}}}, // IDR alone; FU-A; non-IDR
}

func TestKeyFrameStart(t *testing.T) {
	for _, c := range keyFrames {
		for _, p := range c.key {
			if !KeyFrameStart(c.codec, p) {
				t.Errorf("%v % x: not a key frame's start", c.codec, p)
			}
			if KeyFrameStart(NoVideo, p) {
				t.Errorf("audio % x: a key frame", p)
			}
		}
		for _, p := range c.not {
			if KeyFrameStart(c.codec, p) {
				t.Errorf("%v % x: a key frame's start", c.codec, p)
			}
		}
		if got, ok := VideoCodec(c.codec.String()); !ok || got != c.codec {
			t.Errorf("VideoCodec(%q) = %v %v", c.codec.String(), got, ok)
		}
	}
	if _, ok := VideoCodec("H265"); ok {
		t.Error("H265 has no key-frame test, yet VideoCodec takes it")
	}
}

// gating runs one scenario on a data plane: a sender with an audio SSRC
// (1) and a video one (2, AV1) gains receivers. A new receiver gets audio
// and sender reports at once, and video from the next key frame's first
// packet on; one it already had is not held back again. received are the
// replicas each receiver got so far, and settle waits for them to be as
// expected (the user-space plane is asynchronous).
func gating(t *testing.T, p Plane, from netip.AddrPort, rcv []Receiver, send func([]byte), settle func(want []uint64)) {
	t.Helper()
	sources := []Source{{SSRC: 1}, {SSRC: 2, Video: AV1}}
	inter, key := []byte{0x10, 1, 2, 3, 4, 5, 6, 7}, []byte{0x18, 1, 2, 3, 4, 5, 6, 7}
	testenv.Must(t, p.SetStream(from, sources, rcv[:2]))
	waiting := func(want int) {
		t.Helper()
		if st, err := p.StreamStats(from); err != nil || st.Waiting() != want {
			t.Fatalf("waiting %d (%v), want %d", st.Waiting(), err, want)
		}
	}
	waiting(2)
	send(rtpWith(2, 1, inter)) // held back
	send(rtpWith(1, 1, inter)) // audio
	send(senderSR(2))          // sender report of the video
	settle([]uint64{2, 2})
	waiting(2)
	send(rtpWith(2, 2, key))
	send(rtpWith(2, 3, inter))
	settle([]uint64{4, 4})
	waiting(0)
	testenv.Must(t, p.SetStream(from, sources, rcv)) // a third receiver joins
	waiting(1)
	send(rtpWith(2, 4, inter))
	send(rtpWith(1, 2, inter))
	settle([]uint64{6, 6, 1})
	send(rtpWith(2, 5, key))
	settle([]uint64{7, 7, 2})
	waiting(0)
}

func TestNewReceiversWaitForAKeyFrame(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	before := r.outcomes()
	gating(t, r.dp, from, r.receivers(false, 3), func(p []byte) {
		r.verdict(frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: p}.Marshal())
	}, func(want []uint64) {
		t.Helper()
		if got := r.replicas(from); !slices.Equal(got, want) {
			t.Fatalf("replicas per receiver %v, want %v", got, want)
		}
	})
	if got := r.outcomes()[Gated].Packets - before[Gated].Packets; got != 3 {
		t.Errorf("gated counted %d times, want 3", got)
	}
}

func (r *rig) replicas(from netip.AddrPort) []uint64 {
	st, err := r.dp.StreamStats(from)
	testenv.Must(r.t, err)
	n := make([]uint64, len(st.Out))
	for i, c := range st.Out {
		n[i] = c.Packets
	}
	return n
}

func TestUserPlaneNewReceiversWaitForAKeyFrame(t *testing.T) {
	sfu, sender := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	var rcv []Receiver
	for range 3 {
		rcv = append(rcv, Receiver{From: addrOf(sfu), To: addrOf(testenv.LoopbackUDP(t))})
	}
	from := addrOf(sender)
	gating(t, u, from, rcv, func(p []byte) {
		if _, err := sender.WriteToUDP(p, net.UDPAddrFromAddrPort(addrOf(sfu))); err != nil {
			t.Fatal(err)
		}
	}, func(want []uint64) {
		t.Helper()
		var got []uint64
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			st, err := u.StreamStats(from)
			testenv.Must(t, err)
			got = got[:0]
			for _, c := range st.Out {
				got = append(got, c.Packets)
			}
			if slices.Equal(got, want) {
				return
			}
		}
		t.Fatalf("replicas per receiver %v, want %v", got, want)
	})
}

// The eBPF data plane finds the key frames KeyFrameStart finds, on the
// table's payloads and random mutations of them, for every codec.
func TestKeyFrameStartAgreesWithBPF(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	rcv := r.receivers(false, 2)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range keyFrames {
		seeds := append(slices.Clone(c.key), c.not...)
		for i := range 300 {
			p := slices.Clone(seeds[i%len(seeds)])
			if i >= len(seeds) {
				p[rng.IntN(len(p))] ^= byte(1 << rng.IntN(8))
				p = p[:rng.IntN(len(p)+1)]
			}
			// A fresh receiver waits; a key frame's start lets it in.
			testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: 2, Video: c.codec}}, rcv[i%2:i%2+1]))
			testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: 2, Video: c.codec}}, rcv[1-i%2:2-i%2]))
			r.verdict(frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: rtpWith(2, 1, p)}.Marshal())
			if got := r.replicas(from)[0] == 1; got != KeyFrameStart(c.codec, p) {
				t.Errorf("%v % x: BPF lets the new receiver in: %v, Go: %v", c.codec, p, got, !got)
			}
		}
	}
}
