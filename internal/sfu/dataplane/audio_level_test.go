package dataplane

import (
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// audioWithLevel is an RTP audio packet whose header extension holds
// other elements around the audio level (id levelID, one byte b), in the
// one-byte form (RFC 8285), or in the two-byte form when twoByte.
func audioWithLevel(ssrc uint32, seq uint16, levelID, b byte, twoByte bool) []byte {
	p := []byte{0x90, 111} // V=2, X=1; PT 111
	p = binary.BigEndian.AppendUint16(p, seq)
	p = binary.BigEndian.AppendUint32(p, 48000)
	p = binary.BigEndian.AppendUint32(p, ssrc)
	var ext []byte
	if twoByte {
		ext = []byte{3, 2, 0xaa, 0xbb, levelID, 1, b, 0}
		p = append(p, 0x10, 0x00, 0, 2)
	} else {
		ext = []byte{0x31, 0xaa, 0xbb, levelID << 4, b, 0, 0, 0} // id 3 (2 bytes), the level, padding
		p = append(p, 0xbe, 0xde, 0, 2)
	}
	p = append(p, ext...)
	return append(p, make([]byte, 60)...)
}

// The program adds up audio levels as AudioLevelOf reads them (an
// independent reading of RFC 6464 over RFC 8285's two forms): loudness
// 127 - level, the voice flag, only for an audio source with the
// element's id; video and packets without the element count nothing.
// The slow path's (forward) adds to the same sum.
func TestAudioLevelAgreesWithBPF(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	const audioSSRC, videoSSRC, levelID = 0x1234abcd, 0x5678, 5
	testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: audioSSRC, LevelExt: levelID}, {SSRC: videoSSRC, Video: VP8, LevelExt: levelID}}, r.receivers(false, 1)))
	var want AudioLevels
	seq := uint16(100)
	send := func(p []byte) {
		in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: p}.Marshal()
		if ret := r.verdict(in); ret != tcActRedirect && binary.BigEndian.Uint32(p[8:]) == audioSSRC { // (video waits for a key frame)
			o, _ := r.dp.Outcomes()
			t.Fatalf("verdict %d, want redirect (outcomes %v)", ret, o)
		}
	}
	for i, b := range []byte{0x00, 0x7f, 0x80 | 30, 64, 0x80 | 127, 0x80} {
		for _, twoByte := range []bool{false, true} {
			seq++
			p := audioWithLevel(audioSSRC, seq, levelID, b, twoByte)
			level, voiced, ok := AudioLevelOf(p, levelID)
			if !ok || level != b&0x7f || voiced != (b&0x80 != 0) {
				t.Fatalf("packet %d (two-byte %v): AudioLevelOf %d %v %v, want %d %v", i, twoByte, level, voiced, ok, b&0x7f, b&0x80 != 0)
			}
			want.Packets++
			want.Loudness += uint64(127 - level)
			if voiced {
				want.Voiced++
			}
			send(p)
		}
	}
	seq++
	send(audioWithLevel(audioSSRC, seq, levelID+1, 0x80, false)) // another element only
	seq++
	send(audioWithLevel(videoSSRC, seq, levelID, 0x80, false)) // video
	got, err := r.dp.AudioLevels(from)
	testenv.Must(t, err)
	if got != want {
		t.Errorf("the program's levels %+v, want %+v", got, want)
	}
	// The slow path's forwarding adds to the same sum.
	st := &slowStream{stream: r.dp.streams[from], d: r.dp}
	hearLevel(st, Source{SSRC: audioSSRC, LevelExt: levelID}, audioWithLevel(audioSSRC, 1, levelID, 0x80|10, false))
	want.Packets, want.Loudness, want.Voiced = want.Packets+1, want.Loudness+117, want.Voiced+1
	if got, _ := r.dp.AudioLevels(from); got != want {
		t.Errorf("with the slow path's: %+v, want %+v", got, want)
	}
	if mean := want.Sub(AudioLevels{}).Mean(); mean <= 0 || mean > 127 {
		t.Errorf("mean loudness %v", mean)
	}
}

// The user data plane adds up the levels of what it forwards (forward's
// hearLevel, as the eBPF plane's slow path does).
func TestUserPlaneAudioLevels(t *testing.T) {
	sfu, sender, rcv := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}})
	testenv.Must(t, err)
	defer u.Close()
	const ssrc, id = 7, 5
	testenv.Must(t, u.SetStream(addrOf(sender), []Source{{SSRC: ssrc, LevelExt: id}}, []Receiver{{From: addrOf(sfu), To: addrOf(rcv)}}))
	var want AudioLevels
	for i, b := range []byte{0x80 | 20, 100, 0x80} {
		if _, err := sender.WriteToUDP(audioWithLevel(ssrc, uint16(i), id, b, i%2 == 1), net.UDPAddrFromAddrPort(addrOf(sfu))); err != nil {
			t.Fatal(err)
		}
		want.Packets, want.Loudness = want.Packets+1, want.Loudness+uint64(127-b&0x7f)
		if b&0x80 != 0 {
			want.Voiced++
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		got, err := u.AudioLevels(addrOf(sender))
		testenv.Must(t, err)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("levels %+v, want %+v", got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
