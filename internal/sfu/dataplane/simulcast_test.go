package dataplane

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

const ridExt = 10

// simulcastEncoding builds one encoding of a simulcast video: L1T3
// frames of two packets each, a key frame (with its structure) every
// keyEvery frames, its own SSRC, numbers and stream id; payload byte 1 is
// the encoding's index, so a receiver's packet says whose it is.
type simulcastEncoding struct {
	index    byte
	rid      string
	ssrc     uint32
	seq      uint16
	frame    uint16
	ts       uint32
	keyEvery int
	frames   int
	noDD     bool // no dependency descriptor (Firefox's VP8): one layer
	// vp8: VP8 payloads, whose descriptor numbers pictures (PictureID,
	// TL0PICIDX, KEYIDX) from the encoding's own start; else AV1.
	vp8     bool
	picture uint16
	tl0     uint8
	keyIdx  uint8
	// vp8Fields: which optional descriptor bytes it sends (the extension
	// byte's I, L, T, K); 0: all of them.
	vp8Fields byte
}

var simulcastL1T3 = &dd.Structure{DecodeTargets: 3, Chains: 1, ProtectedBy: []int{0, 0, 0}, Templates: []dd.Template{
	{DTIs: dts("SSS"), ChainDiffs: []int{0}},
	{DTIs: dts("SSS"), FrameDiffs: []int{4}, ChainDiffs: []int{4}},
	{TemporalID: 1, DTIs: dts("-DS"), FrameDiffs: []int{2}, ChainDiffs: []int{2}},
	{TemporalID: 2, DTIs: dts("--D"), FrameDiffs: []int{1}, ChainDiffs: []int{1}},
	{TemporalID: 2, DTIs: dts("--D"), FrameDiffs: []int{1}, ChainDiffs: []int{3}},
}}

// nextFrame is the encoding's next frame's packets.
func (e *simulcastEncoding) nextFrame(t testing.TB) [][]byte {
	key := e.frames%e.keyEvery == 0
	tmpl := []int{1, 3, 2, 4}[e.frames%4]
	if key {
		tmpl = 0
	}
	var out [][]byte
	for i := range 2 {
		d := dd.Descriptor{StartOfFrame: i == 0, EndOfFrame: i == 1, TemplateID: tmpl, FrameNumber: e.frame}
		if key && i == 0 {
			d.Structure = simulcastL1T3
		}
		b, err := d.Marshal(simulcastL1T3)
		if err != nil {
			t.Fatal(err)
		}
		h := rtp.Header{Version: 2, PayloadType: 45, SequenceNumber: e.seq, Timestamp: e.ts, SSRC: e.ssrc, Marker: i == 1,
			Extension: true, ExtensionProfile: 0x1000}
		if !e.noDD {
			testenv.Must(t, h.SetExtension(ddExt, b))
		}
		testenv.Must(t, h.SetExtension(ridExt, []byte(e.rid)))
		payload := make([]byte, 60+40*int(e.index))
		payload[1] = e.index
		switch {
		case e.vp8:
			n := e.vp8Descriptor(payload, key, i == 0, simulcastL1T3.Templates[tmpl].TemporalID)
			if i == 1 && e.frames%3 == 1 { // a frame's last packet with one byte of it (shorter than the key-frame test reads)
				payload = payload[:n+1]
			}
		case key && i == 0:
			payload[0] = 0x08 // AV1's N: a key frame
		}
		p, err := (&rtp.Packet{Header: h, Payload: payload}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
		e.seq++
	}
	e.frame, e.ts, e.frames = e.frame+1, e.ts+6000, e.frames+1
	e.picture = (e.picture + 1) & 0x7fff
	return out
}

// vp8Descriptor writes a VP8 payload descriptor (RFC 7741 4.2: X, I with
// a 15-bit PictureID, and L, T and K as e.vp8Fields says) and payload
// header into payload, a packet of the frame of temporal layer tid;
// start: its first packet. It returns the descriptor's length.
func (e *simulcastEncoding) vp8Descriptor(payload []byte, key, start bool, tid int) int {
	if start && tid == 0 {
		e.tl0++
	}
	if start && key {
		e.keyIdx = (e.keyIdx + 1) & 0x1f
	}
	x := e.vp8Fields
	if x == 0 {
		x = 0xf0
	}
	d := []byte{0x80, x | 0x80, 0x80 | byte(e.picture>>8), byte(e.picture)} // X, partition 0; I
	if start {
		d[0] |= 0x10 // S
	}
	if x&0x40 != 0 {
		d = append(d, e.tl0)
	}
	if x&0x30 != 0 {
		d = append(d, byte(tid)<<6|0x20|e.keyIdx) // (Y set)
	}
	header := byte(0x01) // the payload header's P: an inter frame
	if key {
		header = 0x00
	}
	copy(payload, append(d, header))
	return len(d)
}

// probe is a padding-only packet of the encoding (a bandwidth probe).
func (e *simulcastEncoding) probe(t *testing.T) []byte {
	h := rtp.Header{Version: 2, PayloadType: 45, SequenceNumber: e.seq, Timestamp: e.ts, SSRC: e.ssrc, Padding: true,
		Extension: true, ExtensionProfile: 0x1000}
	testenv.Must(t, h.SetExtension(ridExt, []byte(e.rid)))
	b, err := h.Marshal()
	testenv.Must(t, err)
	e.seq++
	return append(b, 0, 0, 0, 0, 0, 0, 0, 8)
}

// The user plane learns a simulcast video's encodings from their stream
// ids, sends each receiver the one its target names (switched at a key
// frame of the one it moves to) as one stream: the SFU's SSRC, sequence
// numbers with no gap across a switch, timestamps and frame numbers that
// only go forward; sender reports only of its encoding, under its SSRC.
// The link sees the lowest encoding's targets, then each higher one whole.
func TestUserPlaneSimulcast(t *testing.T) {
	sfu, sender := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	rcv := []*net.UDPConn{testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)}
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	sim := &Simulcast{RIDExt: ridExt, RIDs: []string{"q", "f"}, SSRC: 0xabcdef}
	sources := []Source{{SSRC: 7}, {Video: AV1, DDExt: ddExt, History: true, Simulcast: sim}}
	from := addrOf(sender)
	receivers := []Receiver{{From: addrOf(sfu), To: addrOf(rcv[0])}, {From: addrOf(sfu), To: addrOf(rcv[1])}}
	testenv.Must(t, u.SetStream(from, sources, receivers))
	encs := []*simulcastEncoding{
		{index: 0, rid: "q", ssrc: 1111, seq: 65000, frame: 30000, ts: 5000, keyEvery: 10},
		{index: 1, rid: "f", ssrc: 2222, seq: 100, frame: 65530, ts: 4e9, keyEvery: 15},
	}
	send := func(p []byte) {
		if _, err := sender.WriteToUDP(p, net.UDPAddrFromAddrPort(addrOf(sfu))); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Microsecond) // (loopback keeps the order; the receivers' buffers keep up)
	}
	round := func() {
		for _, e := range encs {
			for _, p := range e.nextFrame(t) {
				send(p)
			}
		}
	}
	for range 20 { // both learnt, both structures known
		round()
	}
	ls, err := u.Layers(from)
	if err != nil || ls.Targets != 4 || len(ls.Encodings) != 2 || ls.Encodings[0].SSRC != 1111 || ls.Encodings[1].SSRC != 2222 ||
		ls.Bytes[3] <= ls.Bytes[2] {
		t.Fatalf("layers %+v, %v: want q's 3 targets, then f whole (more bytes)", ls, err)
	}
	legs := make([]Leg, 2)
	for i, r := range rcv {
		if legs[i], err = u.Leg(from, addrOf(r)); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Must(t, legs[0].SetTarget(3)) // f
	testenv.Must(t, legs[1].SetTarget(2)) // q, every layer
	for range 20 {
		round()
	}
	for _, c := range rcv { // (before: the top encoding while one was known)
		readAll(t, c)
	}
	sr := senderSR(2222)
	binary.BigEndian.PutUint32(sr[16:], 4e9+123)
	for i := range 40 {
		if i == 10 {
			testenv.Must(t, legs[1].SetTarget(3)) // up to f
			send(sr)
		}
		round()
		if st, _ := legs[1].State(); i == 10 && (st.EncodingSSRC != 1111 || st.SwitchWaiting == 0) {
			t.Errorf("receiver 1 waiting for f's key frame: on %d, waiting %v (want 1111, waiting)", st.EncodingSSRC, st.SwitchWaiting)
		}
	}
	// Receiver 0 stays on f; receiver 1 moves from q to f at f's next key
	// frame.
	var lastOf [2]*rtp.Packet
	for i, c := range rcv {
		got := readAll(t, c)
		var last *rtp.Packet
		encodings, reports := []byte{}, 0
		for _, b := range got {
			if b[1] == 200 {
				reports++
				if binary.BigEndian.Uint32(b[4:]) != sim.SSRC {
					t.Errorf("receiver %d: a sender report under %#x", i, binary.BigEndian.Uint32(b[4:]))
				}
				continue
			}
			var p rtp.Packet
			testenv.Must(t, p.Unmarshal(b))
			if p.SSRC != sim.SSRC {
				t.Fatalf("receiver %d: SSRC %#x, want the SFU's %#x", i, p.SSRC, sim.SSRC)
			}
			if len(encodings) == 0 || encodings[len(encodings)-1] != p.Payload[1] {
				encodings = append(encodings, p.Payload[1])
			}
			if last != nil {
				if p.SequenceNumber != last.SequenceNumber+1 || int32(p.Timestamp-last.Timestamp) < 0 ||
					int16(frameOfPacket(t, &p)-frameOfPacket(t, last)) < 0 {
					t.Fatalf("receiver %d: %d/%d/frame %d after %d/%d/frame %d: not one stream", i, p.SequenceNumber, p.Timestamp,
						frameOfPacket(t, &p), last.SequenceNumber, last.Timestamp, frameOfPacket(t, last))
				}
			}
			last = &p
		}
		lastOf[i] = last
		want := map[int]string{0: "\x01", 1: "\x00\x01"}[i]
		if string(encodings) != want {
			t.Errorf("receiver %d took encodings %v, want %v", i, encodings, []byte(want))
		}
		if want := 1 - i; reports != want { // (receiver 1 was still on q when f's report came)
			t.Errorf("receiver %d got %d sender reports of f, want %d", i, reports, want)
		}
	}
	o, _ := u.Outcomes()
	if o[OtherEncoding].Packets == 0 || o[UnknownSender].Packets != 0 {
		t.Errorf("outcomes %v: want packets of encodings a receiver does not take counted, none unknown", o)
	}
	// A NACK's packet comes from the history of the encoding in force, as
	// the receiver knows it.
	st, _ := legs[1].State()
	if lastOf[1] == nil {
		t.Fatal("receiver 1 got nothing")
	}
	seq, ok := legs[1].Original(lastOf[1].SequenceNumber)
	p, found := legs[1].Packet(lastOf[1].SequenceNumber)
	if !ok || !found || binary.BigEndian.Uint32(p[8:]) != sim.SSRC || binary.BigEndian.Uint32(p[4:]) != lastOf[1].Timestamp || !bytes.HasSuffix(p, lastOf[1].Payload) {
		t.Errorf("receiver 1's number %d: the sender's %d (%v), in the history %v, not as the receiver got it", lastOf[1].SequenceNumber, seq, ok, found)
	}
	if st.Current != 3 || st.EncodingSSRC != 2222 {
		t.Errorf("receiver 1's current target %d on %d: want f's (3, 2222)", st.Current, st.EncodingSSRC)
	}
}

func readAll(t *testing.T, c *net.UDPConn) [][]byte {
	var out [][]byte
	for {
		buf := make([]byte, 1500)
		testenv.Must(t, c.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
		n, err := c.Read(buf)
		if err != nil {
			return out
		}
		out = append(out, buf[:n])
	}
}

func frameOfPacket(t *testing.T, p *rtp.Packet) uint16 {
	b := p.GetExtension(ddExt)
	if len(b) < 3 {
		t.Fatalf("no descriptor in %d", p.SequenceNumber)
	}
	return binary.BigEndian.Uint16(b[1:])
}
