package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pion/rtp"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/sfu/layers"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

const ddExt = synth.DDExtensionID

// capturedVideo is the captured Chromium AV1 (L1T3) stream's video
// packets through capturedChannel.
func capturedVideo(t *testing.T, first uint16) [][]byte {
	rec, err := synth.Chromium()
	if err != nil {
		t.Fatal(err)
	}
	return capturedChannel(rec.Packets, rec.Video.SSRC, first)
}

// capturedSwitching is Chromium's video through L1T3, L1T2, L1T3, L1T1,
// L1T3 and L1T3 at half the resolution (template offsets 0, 5, 8, 13, 15,
// 20; the dependency descriptor tests read it too) through
// capturedChannel. The capture is video only, read from its file: package
// synth does not embed it.
func capturedSwitching(t *testing.T, first uint16) [][]byte {
	f, err := os.Open("../../testbed/synth/testdata/chromium-av1-switching.rtpdump")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pkts, err := synth.ReadRTPDump(f)
	if err != nil || len(pkts) == 0 {
		t.Fatalf("%d packets, %v", len(pkts), err)
	}
	return capturedChannel(pkts, binary.BigEndian.Uint32(pkts[0].Data[8:]), first)
}

// capturedChannel is a capture's packets of ssrc, padding probes
// included, renumbered to start at first (to cross the wrap), then lost
// and reordered by lossyChannel.
func capturedChannel(pkts []synth.Packet, ssrc uint32, first uint16) [][]byte {
	var in [][]byte
	var base uint16
	for _, p := range pkts {
		if binary.BigEndian.Uint32(p.Data[8:]) != ssrc {
			continue
		}
		b := append([]byte(nil), p.Data...)
		if len(in) == 0 {
			base = binary.BigEndian.Uint16(b[2:])
		}
		binary.BigEndian.PutUint16(b[2:], binary.BigEndian.Uint16(b[2:])-base+first)
		in = append(in, b)
	}
	return lossyChannel(in)
}

// lossyChannel loses every 23rd and 41st packet and swaps every 17th
// with the next: losses inside frames and between them, late packets of
// every layer.
func lossyChannel(in [][]byte) [][]byte {
	var out [][]byte
	for i, p := range in {
		if i%23 == 22 || i%41 == 40 {
			continue
		}
		out = append(out, p)
		if n := len(out); i%17 == 16 && n > 1 {
			out[n-1], out[n-2] = out[n-2], out[n-1]
		}
	}
	return out
}

// switchingStream is L1T3 (template offset 0), then L1T2 (offset 5), then
// L1T3 again (offset 8), as libwebrtc moves the offset on a layer switch:
// frames in the L1T3 cadence T0 T2 T1 T2, 3 packets each, two-byte
// extension headers, a key frame with its structure at each switch.
func switchingStream(t *testing.T, first uint16) [][]byte {
	pkts, _ := switchingPackets(t, first)
	return lossyChannel(pkts)
}

// lateStructureStream is switchingStream's packets, none lost, with each
// key frame's first packet, the one attaching the structure, arriving
// after the frame's second: the new templates are unknown until then, and
// the late packet switches nothing.
func lateStructureStream(t *testing.T, first uint16) [][]byte {
	pkts, structures := switchingPackets(t, first)
	for _, k := range structures {
		pkts[k], pkts[k+1] = pkts[k+1], pkts[k]
	}
	return pkts
}

// switchingPackets are switchingStream's packets before the channel, and
// the indexes of those attaching a structure.
func switchingPackets(t *testing.T, first uint16) (out [][]byte, structures []int) {
	l1t3 := &dd.Structure{DecodeTargets: 3, Chains: 1, ProtectedBy: []int{0, 0, 0}, Templates: []dd.Template{
		{DTIs: dts("SSS"), ChainDiffs: []int{0}},
		{DTIs: dts("SSS"), FrameDiffs: []int{4}, ChainDiffs: []int{4}},
		{TemporalID: 1, DTIs: dts("-DS"), FrameDiffs: []int{2}, ChainDiffs: []int{2}},
		{TemporalID: 2, DTIs: dts("--D"), FrameDiffs: []int{1}, ChainDiffs: []int{1}},
		{TemporalID: 2, DTIs: dts("--D"), FrameDiffs: []int{1}, ChainDiffs: []int{3}},
	}}
	l1t2 := &dd.Structure{DecodeTargets: 2, Chains: 1, ProtectedBy: []int{0, 0}, Templates: []dd.Template{
		{DTIs: dts("SS"), ChainDiffs: []int{0}},
		{DTIs: dts("SS"), FrameDiffs: []int{2}, ChainDiffs: []int{2}},
		{TemporalID: 1, DTIs: dts("-D"), FrameDiffs: []int{1}, ChainDiffs: []int{1}},
	}}
	second := *l1t3
	l1t2.IDOffset, second.IDOffset = 5, 8
	seq, frameNo := first, uint16(65500)
	for _, s := range []*dd.Structure{l1t3, l1t2, &second} {
		for f := range 40 {
			tmpl := 0 // key frame
			if f > 0 {
				tmpl = map[int][]int{3: {1, 3, 2, 4}, 2: {1, 2, 1, 2}}[s.DecodeTargets][f%4]
			}
			for i := range 3 {
				d := dd.Descriptor{StartOfFrame: i == 0, EndOfFrame: i == 2, TemplateID: (s.IDOffset + tmpl) % 64, FrameNumber: frameNo}
				if f == 0 && i == 0 {
					d.Structure = s
					structures = append(structures, len(out))
				}
				b, err := d.Marshal(s)
				if err != nil {
					t.Fatal(err)
				}
				h := rtp.Header{Version: 2, PayloadType: 45, SequenceNumber: seq, Timestamp: uint32(frameNo) * 3000, SSRC: 0x5eed,
					Extension: true, ExtensionProfile: 0x1000}
				testenv.Must(t, h.SetExtension(ddExt, b))
				payload := make([]byte, 100+int(seq)%50)
				if f == 0 && i == 0 {
					payload[0] = 0x08 // AV1's N: a new coded video sequence, a key frame
				}
				pkt, err := (&rtp.Packet{Header: h, Payload: payload}).Marshal()
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, pkt)
				seq++
			}
			frameNo++
		}
	}
	return out, structures
}

func dts(s string) []dd.DTI {
	var out []dd.DTI
	for _, c := range s {
		out = append(out, dd.DTI(map[rune]int{'-': 0, 'D': 1, 'S': 2, 'R': 3}[c]))
	}
	return out
}

// reference is the Go data plane's decision for every receiver (the user
// plane's code: frameOf, templatesOf, layers.Replica).
type reference struct {
	templates sfuLayerTemplates
	structure []byte
	replicas  []layers.Replica
}

func newReference(receivers int) *reference {
	ref := &reference{replicas: make([]layers.Replica, receivers)}
	for i := range ref.replicas {
		ref.replicas[i] = layers.NewReplica()
	}
	return ref
}

// step is the packet's frame, whether it attaches a structure, and its
// outcome per receiver: -1 dropped, else the number it is sent with
// (padding: number + 1<<16).
func (ref *reference) step(p []byte, targets []uint8, now uint64) (f layers.Frame, attaches bool, out []int) {
	cl := Classify(p)
	f, _, structure := frameOf(p, len(p)-len(cl.Payload), ddExt, &ref.templates)
	f.Key = KeyFrameStart(AV1, cl.Payload)
	attaches = structure != nil
	if attaches {
		if d, err := dd.Parse(structure, nil); err == nil && d.Structure != nil {
			ref.templates, ref.structure = templatesOf(d.Structure), structure
		}
	}
	out = make([]int, len(targets))
	for i, target := range targets {
		n, v := ref.replicas[i].Decide(&f, target, now)
		switch v {
		case layers.Drop:
			out[i] = -1
		case layers.Padding:
			out[i] = int(n) + 1<<16
		default:
			out[i] = int(n)
		}
	}
	return f, attaches, out
}

// agreementStreams are the streams TestLayersAgreeWithBPF plays.
var agreementStreams = map[string]func(*testing.T, uint16) [][]byte{
	"chromium": capturedVideo, "chromium-switching": capturedSwitching, "switching": switchingStream,
	"late-structure": lateStructureStream}

// agreementTargets are the receivers' targets at packet k of n: one never
// adapted, targets 2, 1 and 0, one moved 0 -> 2 -> 1, and one paused for
// a while (its video resumes at a key frame).
func agreementTargets(targets []uint8, k, n int) []uint8 {
	if targets == nil {
		targets = []uint8{layers.AllTargets, 2, 1, 0, 0, 1}
	}
	switch k {
	case n / 4:
		targets[5] = layers.NoVideo
	case n / 3:
		targets[4] = 2
	case n / 2:
		targets[5] = 2
	case 2 * n / 3:
		targets[4] = 1
	}
	return targets
}

// pausedReceiver is agreementTargets' receiver whose video pauses: it
// gets no key frame while paused.
const pausedReceiver = 5

// Every receiver gets each frame whole or not at all (a late packet of a
// frame it does not get goes as padding), and every key frame, through
// every structure change of the captured and scripted streams: a key
// frame attaching a structure of fewer decode targets than the receiver's
// moves it down at its first packet (or, that packet late, at the first
// the new templates name), one of more is a switch point up. (The data plane's decisions
// are the Go reference's: TestLayersAgreeWithBPF.)
func TestFramesGoWhole(t *testing.T) {
	for name, stream := range agreementStreams {
		pkts := stream(t, 65200)
		var targets []uint8
		ref := newReference(6)
		type counts struct{ sent, withheld int }
		keyFrames := map[uint16]bool{}
		frames := make([]map[uint16]*counts, len(ref.replicas))
		for i := range frames {
			frames[i] = map[uint16]*counts{}
		}
		for k, p := range pkts {
			targets = agreementTargets(targets, k, len(pkts))
			f, attaches, out := ref.step(p, targets, 1)
			if f.Packet.Padding {
				continue
			}
			if attaches {
				keyFrames[f.Packet.Frame] = true
			}
			for i, n := range out {
				c := frames[i][f.Packet.Frame]
				if c == nil {
					c = &counts{}
					frames[i][f.Packet.Frame] = c
				}
				if n < 0 || n >= 1<<16 {
					c.withheld++
				} else {
					c.sent++
				}
			}
		}
		for i := range frames {
			for n, c := range frames[i] {
				if c.sent > 0 && c.withheld > 0 {
					t.Errorf("%s: receiver %d got %d of frame %d's %d packets", name, i, c.sent, n, c.sent+c.withheld)
				}
				if keyFrames[n] && c.sent == 0 && i != pausedReceiver {
					t.Errorf("%s: receiver %d got none of key frame %d", name, i, n)
				}
			}
		}
	}
}

// The eBPF data plane's layer decisions and renumbering agree with the Go
// reference's, packet by packet and receiver by receiver, on the captured
// Chromium streams (L1T3, and one switching between L1T3, L1T2 and L1T1
// and resolutions) and on a scripted L1T3 -> L1T2 -> L1T3 switch
// (template offsets 0, 5, 8), all with losses and reordering and across
// the sequence number wrap: receivers at every target, one never adapted (the sender's
// packets byte for byte), one moved up and down on the way. Each replica's
// checksums are checked by an independent parse; padding goes out through
// Config.Send.
func TestLayersAgreeWithBPF(t *testing.T) {
	for name, stream := range agreementStreams {
		t.Run(name, func(t *testing.T) { layersAgree(t, name, stream, false) })
	}
	// Every third packet through the eBPF plane's slow path (what its
	// program hands to the stack, forwarded in user space on the same
	// maps): the numbers and layers run on across the two paths.
	t.Run("switching/slow-path", func(t *testing.T) { layersAgree(t, "switching", switchingStream, true) })
}

func layersAgree(t *testing.T, name string, stream func(*testing.T, uint16) [][]byte, slow bool) {
	r := newRig(t)
	padded := make(chan paddedPacket, 64)
	r.dp.sendPadding = func(p []byte, _, to netip.AddrPort) error {
		padded <- paddedPacket{to, bytes.Clone(p)}
		return nil
	}
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	var slowConn *mediaConn
	if slow {
		slowConn = r.slowPath(t, sfu)
	}
	pkts := stream(t, 65200)
	ssrc := binary.BigEndian.Uint32(pkts[0][8:])
	rcv := r.receivers(false, 6)
	testenv.Must(t, r.dp.SetStream(from, []Source{{SSRC: ssrc, Video: AV1, DDExt: ddExt}}, rcv))
	for i := range rcv { // no key frame wait: the streams start mid-way
		testenv.Must(t, r.dp.objs.ReplicaGates.Put(r.dp.streams[from].legs[i].slot, uint32(0)))
	}
	var targets []uint8
	ref := newReference(len(rcv))
	fd := r.capture(t)
	mismatches := 0
	var sent, dropped, padding [6]int
	batch := newReplicaBatch(false)
	for k, p := range pkts {
		targets = agreementTargets(targets, k, len(pkts))
		for i, tg := range targets {
			testenv.Must(t, r.leg(from, rcv[i].To).SetTarget(targetOf(tg)))
		}
		_, _, want := ref.step(p, targets, coarseNow())
		in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: p}.Marshal()
		expect := 0
		for _, n := range want {
			if n >= 0 {
				expect++
			}
		}
		var got []int
		if slow && k%3 == 0 {
			got = r.runSlow(t, fd, slowConn, p, from, batch, rcv, padded, expect)
		} else {
			got = r.runCaptured(t, fd, in, rcv, padded, expect)
		}
		for i, n := range want {
			switch {
			case n < 0:
				dropped[i]++
			case n >= 1<<16:
				padding[i]++
			default:
				sent[i]++
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			if mismatches++; mismatches < 10 {
				t.Errorf("packet %d (seq %d): BPF %v, Go %v", k, binary.BigEndian.Uint16(p[2:]), got, want)
			}
		}
		if ref.structure != nil { // the agent installs what the Go reference did at once
			r.awaitTemplates(t, from, ref.templates)
		}
	}
	ls, err := r.dp.Layers(from)
	testenv.Must(t, err)
	if ls.Targets != int(ref.templates.Targets) || ls.Bytes[0] == 0 || ls.Bytes[len(ls.Bytes)-1] <= ls.Bytes[0] {
		t.Errorf("layers: %+v", ls)
	}
	if o, ok := r.leg(from, rcv[3].To).Original(0); ok && o == 0 {
		t.Error("Original gives the number back unchanged for a renumbered receiver")
	}
	t.Logf("%d packets, %d mismatches; sent %v, dropped %v, padding %v; layers %+v", len(pkts), mismatches, sent, dropped, padding, ls)
	if dropped[0] != 0 || sent[0] != len(pkts) || dropped[3] == 0 || sent[3] == 0 ||
		(strings.HasPrefix(name, "chromium") && padding[2]+padding[3] == 0) {
		t.Error("the streams do not exercise dropping, renumbering and padding (the captured ones)")
	}
}

// slowPath gives the rig's data plane a media socket at the SFU's address
// (on lo), as Load's Conns would, for runSlow; out0 finishes checksums in
// software so that the capture verifies them.
func (r *rig) slowPath(t testing.TB, sfu netip.AddrPort) *mediaConn {
	testenv.Must(t, r.ns.IP("addr", "add", sfu.Addr().String()+"/32", "dev", "lo"))
	_, err := r.ns.Output("ethtool", "-K", "out0", "tx", "off")
	testenv.Must(t, err)
	var c *net.UDPConn
	testenv.Must(t, r.ns.Do(func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(sfu))
		return err
	}))
	t.Cleanup(func() { c.Close() })
	mc := newMediaConn(c, nil)
	r.dp.fwd.conns = map[netip.AddrPort]*mediaConn{sfu: mc}
	return mc
}

// runSlow is runCaptured for a packet the program handed to the stack:
// the plane's slow path forwards it from its socket.
func (r *rig) runSlow(t *testing.T, fd int, c *mediaConn, p []byte, from netip.AddrPort, b *replicaBatch, rcv []Receiver,
	padded chan paddedPacket, expect int) []int {
	t.Helper()
	r.dp.handle(c, p, from, b)
	return r.collect(t, fd, rcv, padded, expect, nil)
}

// capture is a packet socket on out1 for the replicas.
func (r *rig) capture(t *testing.T) int {
	var fd int
	testenv.Must(t, r.ns.Do(func() error {
		var err error
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: r.far.Index})
	}))
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// runCaptured runs one frame through the program and says per receiver
// what it got: -1 nothing, the sequence number, or padding's number +
// 1<<16. Replicas are told apart by destination port and parsed (their
// checksums verified) independently. It waits for expect of them (a
// replica too many shows up with the next packet).
func (r *rig) runCaptured(t *testing.T, fd int, in []byte, rcv []Receiver, padded chan paddedPacket, expect int) []int {
	t.Helper()
	ret, last, _ := r.runOn(r.in, in, false)
	if ret != tcActRedirect {
		last = nil
	}
	return r.collect(t, fd, rcv, padded, expect, last)
}

// collect is what each receiver got of one packet (simCollect): its
// replica's sequence number, padding's number + 1<<16, or -1.
func (r *rig) collect(t *testing.T, fd int, rcv []Receiver, padded chan paddedPacket, expect int, last []byte) []int {
	t.Helper()
	payloads, pads := r.simCollect(t, fd, rcv, padded, expect, last)
	got := make([]int, len(rcv))
	for i, p := range payloads {
		switch {
		case p == nil:
			got[i] = -1
		case pads[i]:
			got[i] = int(binary.BigEndian.Uint16(p[2:])) + 1<<16
		default:
			got[i] = int(binary.BigEndian.Uint16(p[2:]))
		}
	}
	return got
}

// awaitTemplates waits until the data plane holds the templates the Go
// reference installed (the ring buffer's reader installs them).
func (r *rig) awaitTemplates(t *testing.T, from netip.AddrPort, want sfuLayerTemplates) {
	t.Helper()
	id := r.dp.streams[from].id
	for range 200 {
		var have sfuLayerTemplates
		testenv.Must(t, r.dp.objs.SenderTemplates.Lookup(id, &have))
		if have == want {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("the data plane did not install the structure's templates")
}

// structureTargets (and dd_read's count, which TestLayersAgreeWithBPF
// holds to it) reads the decode target count the parser reads, on every
// structure of the captured streams, and nothing from a descriptor cut
// short.
func TestStructureTargets(t *testing.T) {
	seen := 0
	for _, stream := range []func(*testing.T, uint16) [][]byte{capturedVideo, capturedSwitching} {
		for _, p := range stream(t, 0) {
			d := rtpExtension(p, len(p)-len(Classify(p).Payload), ddExt)
			if len(d) < 4 || d[3]&0x80 == 0 {
				continue
			}
			parsed, err := dd.Parse(d, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := structureTargets(d); int(got) != parsed.Structure.DecodeTargets {
				t.Errorf("% x: %d decode targets, the parser reads %d", d[:5], got, parsed.Structure.DecodeTargets)
			}
			seen++
		}
	}
	if seen < 6 {
		t.Errorf("%d structures in the captures", seen)
	}
	for _, d := range [][]byte{{0x80, 0, 1}, {0x80, 0, 1, 0x80}} {
		if n := structureTargets(d); n != 0 {
			t.Errorf("% x: %d decode targets from a descriptor cut short", d, n)
		}
	}
}
