package leg

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/ratecontrol"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// fakePlane is a data plane that records: what each leg was sent, what
// went to senders, the targets set; its history and its legs' numbers are
// the test's.
type fakePlane struct {
	mu       sync.Mutex
	streams  map[netip.AddrPort][]dataplane.Receiver
	history  map[uint16][]byte
	legs     map[netip.AddrPort]*fakeLeg
	toSender [][]byte
	layers   dataplane.Layers
	in       uint64 // bytes in, for StreamStats
	levels   map[netip.AddrPort]dataplane.AudioLevels
}

func newFakePlane() *fakePlane {
	return &fakePlane{streams: map[netip.AddrPort][]dataplane.Receiver{}, history: map[uint16][]byte{}, legs: map[netip.AddrPort]*fakeLeg{}}
}

func (p *fakePlane) SetStream(from netip.AddrPort, _ []dataplane.Source, rs []dataplane.Receiver) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.streams[from] = slices.Clone(rs)
	for _, r := range rs {
		if p.legs[r.To] == nil {
			p.legs[r.To] = &fakeLeg{plane: p, target: -1, twcc: r.TWCC, log: map[uint16]dataplane.Sent{}}
		}
	}
	return nil
}

func (p *fakePlane) RemoveStream(from netip.AddrPort) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.streams, from)
	return nil
}

func (p *fakePlane) StreamStats(netip.AddrPort) (dataplane.StreamStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return dataplane.StreamStats{In: dataplane.Counter{Bytes: p.in}}, nil
}
func (p *fakePlane) Outcomes() (map[dataplane.Outcome]dataplane.Counter, error) { return nil, nil }
func (p *fakePlane) Close() error                                               { return nil }
func (p *fakePlane) Layers(netip.AddrPort) (dataplane.Layers, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return dataplane.Layers{Targets: p.layers.Targets, Bytes: slices.Clone(p.layers.Bytes)}, nil
}

func (p *fakePlane) Packet(_ netip.AddrPort, seq uint16) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	b, ok := p.history[seq]
	return bytes.Clone(b), ok
}

func (p *fakePlane) Leg(_, to netip.AddrPort) (dataplane.Leg, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if l := p.legs[to]; l != nil {
		return l, nil
	}
	return nil, errors.New("no such leg")
}

func (p *fakePlane) AudioLevels(from netip.AddrPort) (dataplane.AudioLevels, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.levels[from], nil
}

func (p *fakePlane) Arrivals(netip.AddrPort) (*dataplane.ArrivalLog, error) {
	return nil, errors.New("none")
}

func (p *fakePlane) Send(b []byte, _, _ netip.AddrPort) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.toSender = append(p.toSender, bytes.Clone(b))
	return nil
}

// fakeLeg renumbers as original says (nil: the sender's numbers).
type fakeLeg struct {
	plane    *fakePlane
	state    dataplane.ReceiverLayers // what State says
	mu       sync.Mutex
	target   int
	original func(uint16) (uint16, bool)
	dropped  map[uint16]bool // frames not sent
	sent     [][]byte
	twcc     bool
	next     uint16
	log      map[uint16]dataplane.Sent
}

func (l *fakeLeg) FrameSent(f uint16) (bool, bool) { return !l.dropped[f], true }

func (l *fakeLeg) SetTarget(t int) error {
	l.mu.Lock()
	l.target = t
	l.mu.Unlock()
	return nil
}
func (l *fakeLeg) State() (dataplane.ReceiverLayers, error) { return l.state, nil }
func (l *fakeLeg) Packet(number uint16) ([]byte, bool) {
	seq, ok := l.Original(number)
	if !ok {
		return nil, false
	}
	return l.plane.Packet(netip.AddrPort{}, seq)
}

func (l *fakeLeg) Original(n uint16) (uint16, bool) {
	if l.original == nil {
		return n, true
	}
	return l.original(n)
}
func (l *fakeLeg) Send(p []byte, off int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.twcc && off > 0 {
		binary.BigEndian.PutUint16(p[off:], l.next)
		l.log[l.next] = dataplane.Sent{At: dataplane.MonoNow(), Size: len(p)}
		l.next++
	}
	l.sent = append(l.sent, bytes.Clone(p))
	return nil
}
func (l *fakeLeg) Sent(seq uint16) (dataplane.Sent, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.log[seq]
	return s, ok
}
func (l *fakeLeg) TWCC() bool { return l.twcc }

func (l *fakeLeg) packets() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.sent)
}

var (
	pubAddr = netip.MustParseAddrPort("10.0.0.5:5000")
	sfuAddr = netip.MustParseAddrPort("10.0.0.1:40000")
	recvA   = netip.MustParseAddrPort("10.0.0.6:6000")
	recvB   = netip.MustParseAddrPort("10.0.0.7:7000")
)

const videoSSRC, twccID = 0xfeed, 3

// newTable is a table on a fake plane with one sender, legs to A (RTX
// and transport-cc) and B (neither), and a clock the test moves.
func newTable(t *testing.T) (*Table, *fakePlane, *Sender, *time.Duration) {
	now := new(time.Duration)
	*now = time.Hour
	plane := newFakePlane()
	table, err := NewTable(Config{Plane: plane, Routes: NewRoutes(), Adapt: true, Now: func() time.Duration { return *now }})
	if err != nil {
		t.Fatal(err)
	}
	s, err := table.AddSender(SenderConfig{Room: "r", ID: "pub", From: pubAddr, Via: sfuAddr, VideoSSRC: videoSSRC,
		Sources: []dataplane.Source{{SSRC: videoSSRC, Video: dataplane.AV1, TWCCExt: twccID, History: true}}})
	if err != nil {
		t.Fatal(err)
	}
	err = s.SetLegs([]LegConfig{
		{Receiver: "A", From: sfuAddr, To: recvA, TTL: 64, TWCC: true, TWCCExt: twccID, RTX: &RTX{PT: 46, SSRC: 0xa7a7}},
		{Receiver: "B", From: sfuAddr, To: recvB, TTL: 64}})
	if err != nil {
		t.Fatal(err)
	}
	return table, plane, s, now
}

// media is the sender's packet seq: its transport-wide number (from the
// sender's own count), a payload of its own.
func media(t *testing.T, seq uint16) []byte {
	h := rtp.Header{Version: 2, Marker: seq%3 == 0, PayloadType: 45, SequenceNumber: seq, Timestamp: 3000 * uint32(seq), SSRC: videoSSRC,
		Extension: true, ExtensionProfile: 0xBEDE}
	if err := h.SetExtension(twccID, []byte{0x12, 0x34}); err != nil {
		t.Fatal(err)
	}
	b, err := (&rtp.Packet{Header: h, Payload: bytes.Repeat([]byte{byte(seq)}, 100+int(seq%7))}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func nack(numbers ...uint16) []rtcp.Packet {
	return []rtcp.Packet{&rtcp.TransportLayerNack{SenderSSRC: 9, MediaSSRC: videoSSRC, Nacks: rtcp.NackPairsFromSequenceNumbers(numbers)}}
}

// A receiver's NACK is answered from the history, to that receiver only:
// on RTX where it negotiated it (its original number first in the payload,
// the original's header extensions with the leg's transport-wide number),
// on the media SSRC under its own number where it did not. A number it is
// not owed (a dropped layer's) gets nothing; what the SFU never got is
// asked of the sender once, however many receivers ask. The same number
// again within the round trip is not resent.
func TestNACKsAnsweredFromTheHistory(t *testing.T) {
	table, plane, _, now := newTable(t)
	for seq := uint16(100); seq < 110; seq++ {
		plane.history[seq] = media(t, seq)
	}
	legA, legB := plane.legs[recvA], plane.legs[recvB]
	// A is renumbered: its 50 is the sender's 100; 52 was a dropped layer's.
	legA.original = func(n uint16) (uint16, bool) { return n + 50, n != 52 }
	routes := table.cfg.Routes
	*now += time.Second
	testenv.Must(t, routes.Feedback(recvA, nack(50, 52, 53, 70)))
	sent := legA.packets()
	if len(sent) != 2 {
		t.Fatalf("A got %d retransmissions, want 2 (50 and 53)", len(sent))
	}
	for i, n := range []uint16{50, 53} {
		var p rtp.Packet
		testenv.Must(t, p.Unmarshal(sent[i]))
		orig := plane.history[n+50]
		var o rtp.Packet
		testenv.Must(t, o.Unmarshal(orig))
		if p.PayloadType != 46 || p.SSRC != 0xa7a7 || p.Timestamp != o.Timestamp || p.Marker != o.Marker ||
			binary.BigEndian.Uint16(p.Payload) != n || !bytes.Equal(p.Payload[2:], o.Payload) {
			t.Errorf("RTX for %d: %+v", n, p.Header)
		}
		if got := binary.BigEndian.Uint16(p.GetExtension(twccID)); got != uint16(i) {
			t.Errorf("RTX for %d carries transport-wide number %d, want the leg's %d", n, got, i)
		}
		if i == 1 && p.SequenceNumber-binary.BigEndian.Uint16(sent[0][2:]) != 1 {
			t.Errorf("RTX sequence numbers not consecutive")
		}
	}
	if len(legB.packets()) != 0 {
		t.Error("B got A's retransmissions")
	}
	// 70 is the sender's 120: never got; B asks for it too (its own 120).
	testenv.Must(t, routes.Feedback(recvB, nack(120, 105)))
	if got := legB.packets(); len(got) != 1 || !bytes.Equal(got[0][:2], plane.history[105][:2]) ||
		binary.BigEndian.Uint16(got[0][2:]) != 105 || !bytes.Equal(got[0][12:], plane.history[105][12:]) {
		t.Errorf("B (no RTX): %d packets", len(got))
	}
	asked := 0
	for _, b := range plane.toSender {
		pkts, err := rtcp.Unmarshal(b)
		testenv.Must(t, err)
		if n, ok := pkts[0].(*rtcp.TransportLayerNack); ok {
			asked++
			var seqs []uint16
			for _, pair := range n.Nacks {
				seqs = append(seqs, pair.PacketList()...)
			}
			if !slices.Equal(seqs, []uint16{120}) || n.MediaSSRC != videoSSRC {
				t.Errorf("the sender was asked for %v of %x", seqs, n.MediaSSRC)
			}
		}
	}
	if asked != 1 {
		t.Errorf("the sender was asked %d times for a packet two receivers NACKed", asked)
	}
	testenv.Must(t, routes.Feedback(recvA, nack(50)))
	if len(legA.packets()) != 2 {
		t.Error("50 resent again within the round trip")
	}
	st := table.Status()
	if st[0].Retransmissions.Sent != 2 || st[0].Retransmissions.NotOwed != 1 || st[0].Retransmissions.Asked != 1 || st[0].Retransmissions.Repeated != 1 {
		t.Errorf("A's counts %+v", st[0].Retransmissions)
	}
}

// A number kept for a late packet of a layer the receiver does not get
// was filled with padding; NACKed (the padding lost), it gets padding
// again under that number, never the dropped layer's packet.
func TestNACKForADroppedLayerGetsPadding(t *testing.T) {
	table, plane, s, now := newTable(t)
	const ddID = 12
	s.cfg.Sources[0].DDExt = ddID
	for seq := uint16(100); seq < 104; seq++ {
		h := rtp.Header{Version: 2, PayloadType: 45, SequenceNumber: seq, Timestamp: 3000, SSRC: videoSSRC, Extension: true, ExtensionProfile: 0xBEDE}
		testenv.Must(t, h.SetExtension(ddID, []byte{0x80, 0x01, byte(seq)})) // frame 0x0100 + seq
		b, err := (&rtp.Packet{Header: h, Payload: bytes.Repeat([]byte{1}, 200)}).Marshal()
		testenv.Must(t, err)
		plane.history[seq] = b
	}
	legA := plane.legs[recvA]
	legA.dropped = map[uint16]bool{0x0100 + 102: true}
	*now += time.Second
	testenv.Must(t, table.cfg.Routes.Feedback(recvA, nack(101, 102)))
	sent := legA.packets()
	if len(sent) != 2 {
		t.Fatalf("A got %d packets, want 2", len(sent))
	}
	var pad rtp.Packet
	testenv.Must(t, pad.Unmarshal(sent[1]))
	if pad.SequenceNumber != 102 || pad.SSRC != videoSSRC || !pad.Padding || len(pad.Payload) != 0 || len(sent[1]) != 16 {
		t.Errorf("102 (a dropped layer's) answered with %d bytes: %+v", len(sent[1]), pad.Header)
	}
	if st := table.Status()[0].Retransmissions; st.Sent != 1 || st.NotOwed != 1 {
		t.Errorf("A's counts %+v, want 1 sent, 1 not owed", st)
	}
}

// PLIs and FIRs from receivers reach the sender once per interval however
// many receivers ask; a receiver's REMB counts for its link when it has no
// transport-wide feedback.
func TestKeyFramesAskedOncePerInterval(t *testing.T) {
	table, plane, _, now := newTable(t)
	plane.toSender = nil
	*now += time.Second
	pli := []rtcp.Packet{&rtcp.PictureLossIndication{SenderSSRC: 1, MediaSSRC: videoSSRC}}
	testenv.Must(t, table.cfg.Routes.Feedback(recvA, pli))
	testenv.Must(t, table.cfg.Routes.Feedback(recvB, []rtcp.Packet{&rtcp.FullIntraRequest{FIR: []rtcp.FIREntry{{SSRC: videoSSRC}}}}))
	if len(plane.toSender) != 1 {
		t.Fatalf("%d key frame requests for two receivers in a moment, want 1", len(plane.toSender))
	}
	*now += time.Second
	testenv.Must(t, table.cfg.Routes.Feedback(recvB, pli))
	if len(plane.toSender) != 2 {
		t.Errorf("no key frame request a second later")
	}
	if table.cfg.Routes.Feedback(netip.MustParseAddrPort("10.9.9.9:1"), pli) == nil {
		t.Error("feedback from an address that receives nothing was taken")
	}
}

// A leg leaves with one call: out of the stream, the routes and the link;
// the others stay.
func TestLegCloses(t *testing.T) {
	table, plane, s, _ := newTable(t)
	a := s.Legs()[0]
	testenv.Must(t, a.Close())
	if rs := plane.streams[pubAddr]; len(rs) != 1 || rs[0].To != recvB {
		t.Errorf("stream goes to %v", rs)
	}
	if table.cfg.Routes.Feedback(recvA, nack(1)) == nil {
		t.Error("A's feedback still routed")
	}
	if _, ok := table.links["A"]; ok {
		t.Error("A's link outlived its last leg")
	}
	testenv.Must(t, s.Close())
	if _, ok := plane.streams[pubAddr]; ok || len(table.links) != 0 || len(table.senders) != 0 {
		t.Error("the sender left something")
	}
}

// Whatever RTCP a receiver sends, its leg takes it without panicking.
func FuzzFeedback(f *testing.F) {
	for _, pkts := range [][]rtcp.Packet{nack(1, 2, 3), {&rtcp.ReceiverEstimatedMaximumBitrate{Bitrate: 1e5, SSRCs: []uint32{1}}},
		{&rtcp.TransportLayerCC{BaseSequenceNumber: 1, PacketStatusCount: 2, ReferenceTime: 5,
			PacketChunks: []rtcp.PacketStatusChunk{&rtcp.RunLengthChunk{PacketStatusSymbol: 1, RunLength: 2}},
			RecvDeltas:   []*rtcp.RecvDelta{{Type: 1, Delta: 250}, {Type: 1, Delta: 500}}}}} {
		b, _ := rtcp.Marshal(pkts)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		table, _, _, _ := newTable(t)
		pkts, err := rtcp.Unmarshal(b)
		if err != nil {
			return
		}
		_ = table.cfg.Routes.Feedback(recvA, pkts)
		_ = table.cfg.Routes.Feedback(recvB, pkts)
		table.Round()
	})
}

// A burst of NACKs larger than the link's retransmission budget is not
// refused: what has no room waits and goes, oldest first, as the budget
// refills, each packet once however often the receiver NACKs it again;
// what the budget cannot repair within repairWithin is dropped for one
// key frame asked of the sender (not another for the same burst's
// NACKs that follow).
func TestRepairsWaitForRoom(t *testing.T) {
	table, plane, _, now := newTable(t)
	for seq := uint16(100); seq < 140; seq++ {
		plane.history[seq] = media(t, seq)
	}
	routes := table.cfg.Routes
	*now += time.Second
	// B's link (no transport-cc): 16 kbit/s by its REMB; nothing else
	// sent, so its retransmission budget is all of it (a bucket of 1,500
	// bytes, 2,000 more a second).
	testenv.Must(t, routes.Feedback(recvB, []rtcp.Packet{&rtcp.ReceiverEstimatedMaximumBitrate{Bitrate: 16e3, SSRCs: []uint32{videoSSRC}}}))
	table.Round()
	*now += time.Second // the budget fills
	legB := plane.legs[recvB]
	counts := func() Retransmissions {
		for _, st := range table.Status() {
			if st.Receiver == "B" {
				return st.Retransmissions
			}
		}
		return Retransmissions{}
	}
	var burst []uint16
	for n := uint16(100); n < 140; n++ {
		burst = append(burst, n)
	}
	plis := func() int {
		n := 0
		for _, b := range plane.toSender {
			if pkts, err := rtcp.Unmarshal(b); err == nil {
				if _, ok := pkts[0].(*rtcp.PictureLossIndication); ok {
					n++
				}
			}
		}
		return n
	}
	before := plis() // (one when the legs were added)
	testenv.Must(t, routes.Feedback(recvB, nack(burst...)))
	first := len(legB.packets())
	if first == 0 || first >= len(burst) {
		t.Fatalf("%d of %d sent at once, want what a 1,500-byte budget holds", first, len(burst))
	}
	for range 20 { // 100 ms, the receiver NACKing everything again halfway
		*now += 5 * time.Millisecond
		table.Pace()
		if *now%(50*time.Millisecond) == 0 {
			testenv.Must(t, routes.Feedback(recvB, nack(burst...)))
		}
	}
	sent := legB.packets()
	if len(sent) <= first {
		t.Fatalf("nothing more sent as the budget refilled (%d)", len(sent))
	}
	for i, p := range sent {
		if got := binary.BigEndian.Uint16(p[2:]); got != burst[i] { // (no RTX: under its own number)
			t.Fatalf("retransmission %d is %d, want %d: oldest first, each once", i, got, burst[i])
		}
	}
	if plis() != before {
		t.Fatalf("a key frame asked for while the repairs went")
	}
	for range 60 { // 300 ms more: the oldest waiting is overdue
		*now += 5 * time.Millisecond
		table.Pace()
	}
	st := counts()
	if plis() != before+1 || st.Superseded == 0 || st.Sent >= uint64(len(burst)) {
		t.Fatalf("overdue: %d key frame requests, counts %+v; want one request, the rest superseded", plis()-before, st)
	}
	after := len(legB.packets())
	testenv.Must(t, routes.Feedback(recvB, nack(burst...))) // the receiver goes on NACKing until the key frame comes
	for range 100 {
		*now += 5 * time.Millisecond
		table.Pace()
	}
	if plis() != before+1 {
		t.Errorf("%d key frame requests for one burst", plis()-before)
	}
	wasSent := map[uint16]bool{}
	for _, p := range legB.packets()[:after] {
		wasSent[binary.BigEndian.Uint16(p[2:])] = true
	}
	for _, p := range legB.packets()[after:] {
		if n := binary.BigEndian.Uint16(p[2:]); !wasSent[n] {
			t.Errorf("%d, given up for the key frame, sent after all", n)
		}
	}
	t.Logf("%d sent at once, %d by the refills, %d superseded, %d after the key frame request; counts %+v",
		first, after-first, st.Superseded, len(legB.packets())-after, counts())
}

// A paused leg's NACKs (for what its receiver lost before the pause) get
// padding under their numbers: no video, and something under each number,
// so that the receiver stops asking (Chromium NACKs a lost packet every
// 100 ms while nothing newer comes). Nor is the sender asked for what the
// SFU never got.
func TestPausedLegNACKsGetPadding(t *testing.T) {
	table, plane, s, now := newTable(t)
	for seq := uint16(100); seq < 104; seq++ {
		plane.history[seq] = media(t, seq)
	}
	*now += time.Second
	var a *Leg
	for _, l := range s.Legs() {
		if l.cfg.Receiver == "A" {
			a = l
		}
	}
	a.apply(ratecontrol.Decision{Target: ratecontrol.Paused, Reason: "test"})
	asked := len(plane.toSender)
	testenv.Must(t, table.cfg.Routes.Feedback(recvA, nack(100, 103, 120)))
	sent := plane.legs[recvA].packets()
	if len(sent) != 2 {
		t.Fatalf("paused A got %d packets for 3 NACKed numbers (one never got), want 2", len(sent))
	}
	for i, n := range []uint16{100, 103} {
		var p rtp.Packet
		testenv.Must(t, p.Unmarshal(sent[i]))
		if p.SequenceNumber != n || p.SSRC != videoSSRC || !p.Padding || len(p.Payload) != 0 {
			t.Errorf("paused A's answer to %d: %+v, %d bytes of payload; want padding under %d", n, p.Header, len(p.Payload), n)
		}
	}
	for _, b := range plane.toSender[asked:] {
		if pkts, err := rtcp.Unmarshal(b); err == nil {
			if _, ok := pkts[0].(*rtcp.TransportLayerNack); ok {
				t.Error("the sender was asked for a paused leg's packet")
			}
		}
	}
}

// On an encrypted connection a number is never sent twice with other
// bytes: a paused leg's padding for numbers that carried media goes on
// RTX (an empty payload under the original number), and a leg without RTX
// gets no retransmission under its number (each would be a second AES-GCM
// sealing under one nonce); with RTX, NACKs are answered on RTX as ever.
func TestEncryptedLegNeverReusesANumber(t *testing.T) {
	for _, c := range []struct {
		name   string
		rtx    bool
		paused bool
		want   int
	}{{"paused", true, true, 2}, {"no RTX", false, false, 0}, {"RTX", true, false, 2}} {
		t.Run(c.name, func(t *testing.T) {
			table, plane, s, now := newTable(t)
			for seq := uint16(100); seq < 104; seq++ {
				plane.history[seq] = media(t, seq)
			}
			*now += time.Second
			var legs []LegConfig
			for _, l := range s.Legs() {
				cfg := l.cfg
				cfg.Encrypted = true
				if !c.rtx {
					cfg.RTX = nil
				}
				legs = append(legs, cfg)
			}
			testenv.Must(t, s.SetLegs(legs))
			var a *Leg
			for _, l := range s.Legs() {
				if l.cfg.Receiver == "A" {
					a = l
				}
			}
			if c.paused {
				a.apply(ratecontrol.Decision{Target: ratecontrol.Paused, Reason: "test"})
			}
			testenv.Must(t, table.cfg.Routes.Feedback(recvA, nack(100, 103)))
			time.Sleep(50 * time.Millisecond)
			sent := plane.legs[recvA].packets()
			if len(sent) != c.want {
				t.Fatalf("encrypted leg (%s) sent %d packets for 2 NACKed numbers, want %d", c.name, len(sent), c.want)
			}
			for i, b := range sent {
				var p rtp.Packet
				testenv.Must(t, p.Unmarshal(b))
				if p.SSRC == videoSSRC {
					t.Errorf("a retransmission under the media SSRC %d, number %d", p.SSRC, p.SequenceNumber)
				}
				osn := uint16(0)
				if len(p.Payload) >= 2 {
					osn = uint16(p.Payload[0])<<8 | uint16(p.Payload[1])
				}
				if want := []uint16{100, 103}[i]; osn != want || c.paused != (len(p.Payload) == 2) {
					t.Errorf("RTX packet %d: original number %d, %d bytes of payload (paused %v: want only the number)", i, osn, len(p.Payload), c.paused)
				}
			}
		})
	}
}

// The repair queue holds each number once and at most maxWaiting of
// them, whatever a NACK lists; what it gives up for a key frame is
// superseded for keyFrameRepairHold, no longer.
func TestRepairQueueBounds(t *testing.T) {
	var q repairQueue
	now := time.Hour
	added := 0
	for n := range 70000 { // every number, some twice
		if q.add(uint16(n), 100, now) {
			added++
		}
	}
	if added != maxWaiting || len(q.waiting) != maxWaiting || !q.in.has(0) || q.in.has(maxWaiting) {
		t.Fatalf("%d added, %d waiting, want %d", added, len(q.waiting), maxWaiting)
	}
	if q.add(5, 100, now) {
		t.Error("5 queued twice")
	}
	q.pop()
	if q.in.has(0) || !q.add(0, 100, now) {
		t.Error("0, popped, not free to wait again")
	}
	if n := q.giveUp(now, true); n != maxWaiting || len(q.waiting) != 0 || q.in.has(5) {
		t.Fatalf("gave up %d, %d still waiting", n, len(q.waiting))
	}
	if !q.superseded(5, now+keyFrameRepairHold-1) || q.superseded(5, now+keyFrameRepairHold) || q.superseded(maxWaiting+1, now) {
		t.Error("superseded for the wrong numbers or time")
	}
}

// A receiver's reference time report (XR RRTR) is answered at once, to
// that receiver only, with an XR DLRR naming it: the middle 32 bits of its
// NTP timestamp and the delay since it, in 1/65536 s (RFC 3611 4.5), from
// which it takes its round-trip time.
func TestReferenceTimeAnswered(t *testing.T) {
	table, plane, _, now := newTable(t)
	const ntp = 0xe8a1b2c3d4e5f607
	*now += time.Second
	testenv.Must(t, table.cfg.Routes.Feedback(recvA, []rtcp.Packet{
		&rtcp.ReceiverReport{SSRC: 9},
		&rtcp.ExtendedReport{SenderSSRC: 9, Reports: []rtcp.ReportBlock{&rtcp.ReceiverReferenceTimeReportBlock{NTPTimestamp: ntp}}},
	}))
	if got := plane.legs[recvB].packets(); len(got) != 0 {
		t.Errorf("B got %d packets for A's report", len(got))
	}
	sent := plane.legs[recvA].packets()
	if len(sent) != 1 {
		t.Fatalf("A got %d packets, want one XR", len(sent))
	}
	pkts, err := rtcp.Unmarshal(sent[0])
	testenv.Must(t, err)
	xr, ok := pkts[0].(*rtcp.ExtendedReport)
	if !ok || len(pkts) != 1 || len(xr.Reports) != 1 {
		t.Fatalf("A got %v, want one XR with one block", pkts)
	}
	dlrr, ok := xr.Reports[0].(*rtcp.DLRRReportBlock)
	if !ok || len(dlrr.Reports) != 1 {
		t.Fatalf("A got a %T, want a DLRR block with one report", xr.Reports[0])
	}
	if r := dlrr.Reports[0]; r.SSRC != 9 || r.LastRR != 0xb2c3d4e5 || r.DLRR > 65536/1000 {
		t.Errorf("DLRR %+v, want SSRC 9, LastRR b2c3d4e5, a delay under 1 ms", r)
	}
	// A report without RRTR (a receiver that did not negotiate it) gets
	// nothing.
	testenv.Must(t, table.cfg.Routes.Feedback(recvA, []rtcp.Packet{&rtcp.ReceiverReport{SSRC: 9}}))
	if len(plane.legs[recvA].packets()) != 1 {
		t.Error("a receiver report alone was answered")
	}
}

// The sender hears of its best downlink's limit (REMB) only once the limit
// has lasted senderRoomSpan: a dip of a receiver's estimate (a queue a CPU
// stall built) is no reason to lower an encoder every other receiver
// sees; a link that stays narrow is.
func TestSenderToldOfALastingLimit(t *testing.T) {
	table, plane, s, now := newTable(t)
	// B alone: its link (by its REMB) is the sender's best downlink.
	testenv.Must(t, s.SetLegs([]LegConfig{{Receiver: "B", From: sfuAddr, To: recvB, TTL: 64}}))
	rembs := func() (n int, last float32) {
		for _, b := range plane.toSender {
			if pkts, err := rtcp.Unmarshal(b); err == nil {
				if r, ok := pkts[0].(*rtcp.ReceiverEstimatedMaximumBitrate); ok {
					n, last = n+1, r.Bitrate
				}
			}
		}
		return n, last
	}
	round := func(d time.Duration, remb float32) {
		for end := *now + d; *now < end; *now += 100 * time.Millisecond {
			if remb > 0 {
				testenv.Must(t, table.cfg.Routes.Feedback(recvB, []rtcp.Packet{&rtcp.ReceiverEstimatedMaximumBitrate{Bitrate: remb, SSRCs: []uint32{videoSSRC}}}))
			}
			table.Round()
		}
	}
	round(time.Second, 0) // no limit shown
	if n, _ := rembs(); n != 0 {
		t.Fatalf("%d REMBs to the sender with no limit shown", n)
	}
	round(2800*time.Millisecond, 200e3) // B's link narrows, for less than the span
	if n, last := rembs(); n != 0 {
		t.Errorf("the sender was told %v bit/s %v after its only receiver's link narrowed, want nothing before %v", last, 2800*time.Millisecond, senderRoomSpan)
	}
	round(time.Second, 200e3) // lasting
	if n, last := rembs(); n == 0 || last > 200e3 || last < 100e3 {
		t.Errorf("a limit that lasted %v: %d REMBs to the sender, the last %v bit/s; want one, of B's room (at most its 200 kbit/s)", 3800*time.Millisecond, n, last)
	}
}

// On a link that loses packets at random (it lost some lately and queues
// nothing), a retransmission goes a second time, repeatAfter later, on
// RTX under a number of its own; on one that has lost nothing, once. A
// second copy waits behind nothing: with a repair waiting it is dropped.
func TestRetransmissionsDoubledOnARandomlyLossyLink(t *testing.T) {
	table, plane, _, now := newTable(t)
	for seq := uint16(100); seq < 110; seq++ {
		plane.history[seq] = media(t, seq)
	}
	legA := plane.legs[recvA]
	legA.original = func(n uint16) (uint16, bool) { return n + 50, true }
	*now += time.Second
	routes := table.cfg.Routes
	testenv.Must(t, routes.Feedback(recvA, nack(50)))
	table.Pace()
	*now += 20 * time.Millisecond
	table.Pace()
	if n := len(legA.packets()); n != 1 {
		t.Fatalf("a link that has lost nothing: %d retransmissions of one NACKed packet, want 1", n)
	}
	var link *link
	for _, k := range table.links {
		if k.receiver == "A" {
			link = k
		}
	}
	link.mu.Lock()
	link.lossSeen, link.lost = *now, true // (as its estimator's feedback would)
	link.mu.Unlock()
	testenv.Must(t, routes.Feedback(recvA, nack(51)))
	*now += repeatAfter / 2
	table.Pace()
	if n := len(legA.packets()); n != 2 {
		t.Fatalf("%d packets before the second copy is due, want 2", n)
	}
	*now += repeatAfter
	table.Pace()
	sent := legA.packets()
	if len(sent) != 3 {
		t.Fatalf("a randomly lossy link: %d packets, want the retransmission of 51 twice (3 in all)", len(sent))
	}
	var first, second rtp.Packet
	testenv.Must(t, first.Unmarshal(sent[1]))
	testenv.Must(t, second.Unmarshal(sent[2]))
	if second.SSRC != 0xa7a7 || second.SequenceNumber != first.SequenceNumber+1 ||
		binary.BigEndian.Uint16(second.Payload) != 51 || !bytes.Equal(second.Payload, first.Payload) {
		t.Errorf("second copy %+v (payload %x), first %+v", second.Header, second.Payload[:2], first.Header)
	}
	st := table.Status()
	if c := st[0].Retransmissions; c.Sent != 2 || c.Doubled != 1 {
		t.Errorf("counts %+v, want 2 sent, 1 of them doubled", c)
	}
	// Lossy lately, but not for lossyFor: once again.
	*now += lossyFor
	testenv.Must(t, routes.Feedback(recvA, nack(52)))
	*now += 2 * repeatAfter
	table.Pace()
	if n := len(legA.packets()); n != 4 {
		t.Errorf("%v after the last loss: %d packets, want 52 once (4 in all)", lossyFor, n)
	}
}

// A sender whose adapted video sends nothing for silentAfter is silent on
// its legs' inputs (a camera turned off), and is no longer once a byte
// comes; video that is not adapted (no layers) is never silent.
func TestSilentVideo(t *testing.T) {
	table, plane, s, now := newTable(t)
	testenv.Must(t, s.SetLegs([]LegConfig{{Receiver: "B", From: sfuAddr, To: recvB, TTL: 64}}))
	l := s.Legs()[0]
	var sent uint64
	layered := true
	round := func(d time.Duration, sending bool) {
		for end := *now + d; *now < end; *now += 100 * time.Millisecond {
			if sending {
				sent += 1000
			}
			plane.mu.Lock()
			plane.layers = dataplane.Layers{}
			if layered {
				plane.layers = dataplane.Layers{Targets: 3, Bytes: []uint64{sent / 4, sent / 2, sent}}
			}
			plane.mu.Unlock()
			table.Round()
		}
	}
	round(3*time.Second, true)
	if l.input().Silent {
		t.Fatal("silent while sending")
	}
	round(silentAfter-200*time.Millisecond, false)
	if l.input().Silent {
		t.Fatalf("silent after %v without a byte, want after %v", silentAfter-200*time.Millisecond, silentAfter)
	}
	round(400*time.Millisecond, false)
	if !l.input().Silent {
		t.Fatalf("not silent after %v without a byte", silentAfter+200*time.Millisecond)
	}
	round(100*time.Millisecond, true)
	if l.input().Silent {
		t.Fatal("still silent once video came again")
	}
	layered = false
	round(3*time.Second, false)
	if l.input().Silent {
		t.Fatal("video without layers silent")
	}
}

// Last-N 1: of three publishers, the receiver gets video from the one who
// speaks (the others paused, told why: last-n); when another speaks
// louder for long enough, the highlight and the video move to it (the
// first paused again, the second resumed); OnSpeaker hears of each new
// dominant speaker once.
func TestLastN(t *testing.T) {
	now := new(time.Duration)
	*now = time.Hour
	plane := newFakePlane()
	plane.levels = map[netip.AddrPort]dataplane.AudioLevels{}
	var told []string
	closing := false
	table, err := NewTable(Config{Plane: plane, Routes: NewRoutes(), Adapt: true, LastN: 1, Now: func() time.Duration { return *now },
		OnSpeaker: func(room, s string) {
			if closing { // the controller closes senders under its lock, which its Speaker takes
				t.Errorf("told of %q inside Sender.Close", s)
			}
			told = append(told, room+"/"+s)
		}})
	testenv.Must(t, err)
	ids := []string{"a", "b", "c"}
	from, to := map[string]netip.AddrPort{}, map[string]netip.AddrPort{}
	notices := map[string][]string{}
	for i, id := range ids {
		from[id] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(i + 1)}), 5000)
		to[id] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, 1}), uint16(6000+i))
		s, err := table.AddSender(SenderConfig{Room: "r", ID: id, From: from[id], Via: sfuAddr, VideoSSRC: uint32(100 + i),
			Sources: []dataplane.Source{{SSRC: uint32(200 + i), LevelExt: 1}, {SSRC: uint32(100 + i), Video: dataplane.AV1}}})
		testenv.Must(t, err)
		testenv.Must(t, s.SetLegs([]LegConfig{{Receiver: "x", From: sfuAddr, To: to[id], TTL: 64, Notify: func(paused bool, why string) {
			notices[id] = append(notices[id], fmt.Sprintf("%v %s", paused, why))
		}}}))
	}
	speak := func(d time.Duration, loud map[string]float64) {
		for end := *now + d; *now < end; *now += RoundInterval {
			plane.mu.Lock()
			// Adapted video (layers): what last-N pauses.
			video := plane.layers.Bytes
			if len(video) == 0 {
				video = make([]uint64, 3)
			}
			for i := range video {
				video[i] += uint64(1000 * (i + 1))
			}
			plane.layers = dataplane.Layers{Targets: 3, Bytes: video}
			for id, l := range loud {
				lv := plane.levels[from[id]]
				lv.Packets += 12
				lv.Loudness += uint64(12 * l)
				plane.levels[from[id]] = lv
			}
			plane.mu.Unlock()
			table.Round()
		}
	}
	paused := func() (out []string) {
		for _, id := range ids {
			if plane.legs[to[id]].target == ratecontrol.Paused {
				out = append(out, id)
			}
		}
		return out
	}
	speak(2*time.Second, map[string]float64{"a": 90, "b": 20, "c": 0})
	if !slices.Equal(told, []string{"r/a"}) || !slices.Equal(paused(), []string{"b", "c"}) {
		t.Fatalf("a speaking: told %v, paused %v; want a, and b and c paused", told, paused())
	}
	if !slices.Equal(notices["b"], []string{"true last-n"}) || len(notices["a"]) != 0 {
		t.Errorf("notices %v", notices)
	}
	speak(3*time.Second, map[string]float64{"a": 90, "b": 110, "c": 0})
	if !slices.Equal(told, []string{"r/a", "r/b"}) || !slices.Equal(paused(), []string{"a", "c"}) {
		t.Fatalf("b speaking louder: told %v, paused %v; want b, and a and c paused", told, paused())
	}
	if !slices.Equal(notices["b"], []string{"true last-n", "false "}) || !slices.Equal(notices["a"], []string{"true last-n"}) {
		t.Errorf("notices %v", notices)
	}
	if table.Dominant("r") != "b" {
		t.Errorf("dominant %q", table.Dominant("r"))
	}
	// The speaker leaves: the room is told it has none, and b is not
	// ranked again.
	table.mu.Lock()
	b := table.senders[from["b"]]
	table.mu.Unlock()
	closing = true
	testenv.Must(t, b.Close())
	closing = false
	speak(time.Second, map[string]float64{"a": 0, "b": 110, "c": 0})
	if !slices.Equal(told, []string{"r/a", "r/b", "r/"}) || table.Dominant("r") != "" || table.rooms["r"].Len() != 2 {
		t.Errorf("after the speaker left: told %v, dominant %q", told, table.Dominant("r"))
	}
}

// A simulcast receiver's NACK for a packet the history lacks (lost on
// the publisher's uplink) is passed on for the encoding the receiver
// takes, under its own numbers.
func TestSimulcastNackOfTheReceiversEncoding(t *testing.T) {
	table, plane := newSimulcastTable(t)
	plane.legs[recvA].state = dataplane.ReceiverLayers{EncodingSSRC: 2222}
	plane.toSender = nil
	testenv.Must(t, table.cfg.Routes.Feedback(recvA, nack(7)))
	var got []string
	for _, p := range toSender(t, plane) {
		if n, ok := p.(*rtcp.TransportLayerNack); ok {
			got = append(got, fmt.Sprintf("%d:%v", n.MediaSSRC, n.Nacks[0].PacketList()))
		}
	}
	if !slices.Equal(got, []string{"2222:[7]"}) {
		t.Errorf("the sender was asked %v, want 7 of the encoding A takes (2222)", got)
	}
}

// newSimulcastTable: a sender of a simulcast video (its encodings' SSRCs
// as each leg's State says) to A and B.
func newSimulcastTable(t *testing.T) (*Table, *fakePlane) {
	now := new(time.Duration)
	*now = time.Hour
	plane := newFakePlane()
	table, err := NewTable(Config{Plane: plane, Routes: NewRoutes(), Adapt: true, Now: func() time.Duration { return *now }})
	testenv.Must(t, err)
	sim := &dataplane.Simulcast{RIDExt: 10, RIDs: []string{"q", "f"}, SSRC: videoSSRC}
	s, err := table.AddSender(SenderConfig{Room: "r", ID: "pub", From: pubAddr, Via: sfuAddr, VideoSSRC: videoSSRC,
		Sources: []dataplane.Source{{Video: dataplane.AV1, History: true, Simulcast: sim}}})
	testenv.Must(t, err)
	testenv.Must(t, s.SetLegs([]LegConfig{{Receiver: "A", From: sfuAddr, To: recvA, TTL: 64}, {Receiver: "B", From: sfuAddr, To: recvB, TTL: 64}}))
	return table, plane
}

// toSender is the RTCP the SFU sent the sender.
func toSender(t *testing.T, plane *fakePlane) []rtcp.Packet {
	var out []rtcp.Packet
	for _, b := range plane.toSender {
		pkts, err := rtcp.Unmarshal(b)
		testenv.Must(t, err)
		out = append(out, pkts...)
	}
	return out
}
