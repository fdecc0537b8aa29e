package dataplane

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The rig: one namespace, a veth pair the senders' frames arrive on (in0)
// and one the replicas leave by (out0, whose far end out1 is captured).
type rig struct {
	t    testing.TB
	ns   *netns.NS
	dp   *DataPlane
	in   *net.Interface
	out  *net.Interface
	far  *net.Interface
	port uint16
}

const mediaPort = 40000

var (
	senderMAC = net.HardwareAddr{0x02, 0, 0, 0, 0x01, 0x02}
	sfuV4     = netip.MustParseAddr("10.20.1.1")
	sfuV6     = netip.MustParseAddr("fd20:1::1")
)

func newRig(t testing.TB) *rig {
	testenv.RequireRoot(t)
	ns, err := netns.New("ebrtc-sfu")
	if err != nil {
		testenv.Missing(t, "network namespace: %v", err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	for _, pair := range [][2]string{{"in0", "in1"}, {"out0", "out1"}} {
		testenv.Must(t, ns.IP("link", "add", pair[0], "type", "veth", "peer", "name", pair[1]))
		testenv.Must(t, ns.IP("link", "set", pair[0], "up"))
		testenv.Must(t, ns.IP("link", "set", pair[1], "up"))
	}
	// Senders (10.20.0.0/24, fd20::/64) are routed back through in0, so
	// their datagrams pass the source checks there.
	for _, a := range []string{"10.20.0.1/24", "fd20::1/64"} {
		testenv.Must(t, ns.IP("addr", "add", a, "dev", "in0", "nodad"))
	}
	for _, a := range []string{"10.20.2.1/24", "fd20:2::1/64"} {
		testenv.Must(t, ns.IP("addr", "add", a, "dev", "out0", "nodad"))
	}
	r := &rig{t: t, ns: ns, port: mediaPort}
	testenv.Must(t, ns.Do(func() error {
		var err error
		if r.in, err = net.InterfaceByName("in0"); err != nil {
			return err
		}
		if r.out, err = net.InterfaceByName("out0"); err != nil {
			return err
		}
		if r.far, err = net.InterfaceByName("out1"); err != nil {
			return err
		}
		r.dp, err = Load(Config{Media: []netip.AddrPort{netip.AddrPortFrom(sfuV4, mediaPort), netip.AddrPortFrom(sfuV6, mediaPort)}})
		return err
	}))
	t.Cleanup(func() { _ = r.dp.Close() })
	return r
}

// leg is the data plane's leg from from to to.
func (r *rig) leg(from, to netip.AddrPort) Leg {
	r.t.Helper()
	l, err := r.dp.Leg(from, to)
	if err != nil {
		r.t.Fatal(err)
	}
	return l
}

// receivers are n receivers of the sender's family, behind out0.
func (r *rig) receivers(v6 bool, n int) []Receiver {
	var out []Receiver
	for i := range n {
		from, to := netip.AddrPortFrom(sfuV4, mediaPort), netip.MustParseAddrPort(fmt.Sprintf("10.20.2.%d:%d", 10+i, 50000+i))
		if v6 {
			from, to = netip.AddrPortFrom(sfuV6, mediaPort), netip.MustParseAddrPort(fmt.Sprintf("[fd20:2::%x]:%d", 10+i, 50000+i))
		}
		// The receiver is a neighbour on out0.
		testenv.Must(r.t, r.ns.IP("neigh", "replace", to.Addr().String(), "lladdr", receiverMAC(i).String(), "dev", "out0", "nud", "permanent"))
		out = append(out, Receiver{From: from, To: to, TTL: 64})
	}
	return out
}

func receiverMAC(i int) net.HardwareAddr { return net.HardwareAddr{0x02, 0, 0, 0, 0x02, byte(i)} }

// expected is the ith receiver's replica as an independent construction
// builds it: the sender's UDP payload, byte for byte, from the SFU to the
// receiver, out of out0 to the receiver's MAC.
func (r *rig) expected(i int, rc Receiver, payload []byte) []byte {
	return frame.UDP{SrcMAC: r.out.HardwareAddr, DstMAC: receiverMAC(i), Src: rc.From, Dst: rc.To, TTL: rc.TTL, DF: true, Payload: payload}.Marshal()
}

// skBuff is struct __sk_buff up to the fields BPF_PROG_TEST_RUN takes.
type skBuff struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority uint32
	IngressIfindex, Ifindex, TCIndex                                                      uint32
	CB                                                                                    [5]uint32
	Hash, TCClassid, Data, DataEnd, NapiID, Family, RemoteIP4, LocalIP4                   uint32
	RemoteIP6, LocalIP6                                                                   [4]uint32
	RemotePort, LocalPort, DataMeta                                                       uint32
	FlowKeys                                                                              uint64
	Tstamp                                                                                uint64
	WireLen, GSOSegs                                                                      uint32
	Sk                                                                                    uint64
	GSOSize                                                                               uint32
}

const (
	tcActUnspec   = 0xffffffff
	tcActRedirect = 7
	tcActShot     = 2
)

// run feeds in to the program as if it arrived on in0, and returns its
// verdict, the frame as it left the program, and what out1 received
// meanwhile (the clones).
func (r *rig) run(in []byte) (uint32, []byte, [][]byte) { return r.runOn(r.in, in, true) }

// verdict is run without waiting for clones.
func (r *rig) verdict(in []byte) uint32 {
	ret, _, _ := r.runOn(r.in, in, false)
	return ret
}

func (r *rig) runOn(ingress *net.Interface, in []byte, capture bool) (uint32, []byte, [][]byte) {
	r.t.Helper()
	var ret uint32
	out := make([]byte, len(in)+256)
	var got [][]byte
	testenv.Must(r.t, r.ns.Do(func() error {
		opts := &ebpf.RunOptions{Data: in, DataOut: out,
			Context: skBuff{IngressIfindex: uint32(ingress.Index), Ifindex: uint32(ingress.Index)}}
		if !capture {
			var err error
			ret, err = r.dp.Program().Run(opts)
			out = opts.DataOut
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK, int(htons(unix.ETH_P_ALL)))
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: r.far.Index}); err != nil {
			return err
		}
		if ret, err = r.dp.Program().Run(opts); err != nil {
			return err
		}
		out = opts.DataOut
		deadline := time.Now().Add(200 * time.Millisecond)
		buf := make([]byte, 4096)
		for time.Now().Before(deadline) {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err == unix.EAGAIN {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if err != nil {
				return err
			}
			// out1's own traffic (IPv6 neighbour discovery...) is not ours.
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			if _, err := frame.Parse(buf[:n]); err != nil {
				continue
			}
			got = append(got, bytes.Clone(buf[:n]))
		}
		return nil
	}))
	return ret, out, got
}

func htons(v uint16) uint16 { return v>>8 | v<<8 }

// rtpPacket is an RTP packet with two CSRCs, a one-byte-header extension
// and a payload, as a sender would send it.
func rtpPacket(ssrc uint32, seq uint16, payloadLen int) []byte {
	p := []byte{0x92, 96} // V=2, X=1, CC=2; PT 96
	p = binary.BigEndian.AppendUint16(p, seq)
	p = binary.BigEndian.AppendUint32(p, 90000)
	p = binary.BigEndian.AppendUint32(p, ssrc)
	p = binary.BigEndian.AppendUint32(p, 0x11111111)
	p = binary.BigEndian.AppendUint32(p, 0x22222222)
	p = append(p, 0xbe, 0xde, 0, 1, 0x10, 0x07, 0, 0) // one element: id 1, 1 byte
	for i := range payloadLen {
		p = append(p, byte(i*7+1))
	}
	return p
}

func senderSR(ssrc uint32) []byte {
	p := []byte{0x80, 200, 0, 6}
	p = binary.BigEndian.AppendUint32(p, ssrc)
	return append(p, make([]byte, 20)...)
}

// RTP and RTCP sender reports from a joined sender reach every receiver,
// byte for byte as built independently: the clones on the wire in order,
// the last as the program's output, with a redirect verdict.
func TestReplicatesToEveryReceiver(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(map[bool]string{false: "ipv4", true: "ipv6"}[v6], func(t *testing.T) {
			r := newRig(t)
			from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
			if v6 {
				from, sfu = netip.MustParseAddrPort("[fd20::5]:61000"), netip.AddrPortFrom(sfuV6, mediaPort)
			}
			const ssrc = 0x1234abcd
			rcv := r.receivers(v6, 5)
			testenv.Must(t, r.dp.SetStream(from, audio(ssrc, ssrc+1), rcv))
			for name, payload := range map[string][]byte{
				"rtp": rtpPacket(ssrc, 7, 160), "rtp-odd": rtpPacket(ssrc+1, 8, 41), "sr": senderSR(ssrc),
			} {
				t.Run(name, func(t *testing.T) {
					in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: payload}.Marshal()
					ret, last, clones := r.run(in)
					if ret != tcActRedirect {
						t.Fatalf("verdict %d, want redirect", ret)
					}
					if len(clones) != len(rcv)-1 {
						t.Fatalf("%d clones on the wire, want %d", len(clones), len(rcv)-1)
					}
					for i, c := range clones {
						requireFrame(t, fmt.Sprintf("replica %d", i), c, r.expected(i, rcv[i], payload))
					}
					requireFrame(t, "last replica", last, r.expected(len(rcv)-1, rcv[len(rcv)-1], payload))
				})
			}
		})
	}
}

// What is not a joined sender's media goes up to the stack untouched, and
// is counted under its reason.
func TestPassesWhatIsNotJoinedMedia(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	testenv.Must(t, r.dp.SetStream(from, audio(1), r.receivers(false, 2)))
	stun := []byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	shortExt := rtpPacket(1, 1, 0)[:16]                          // X set, the extension header cut off
	longExt := append(rtpPacket(1, 1, 0)[:20], 0xbe, 0xde, 0, 9) // 9 words announced, none there
	longExt = append(longExt, 0, 0, 0, 0)
	badPad := append([]byte{0xa0, 96, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1}, 1, 2, 3, 200) // P: 200 bytes of padding
	cases := []struct {
		name    string
		src     netip.AddrPort
		dport   uint16
		payload []byte
		want    Outcome
	}{
		{"stun", from, mediaPort, stun, Stun},
		{"unknown ssrc", from, mediaPort, rtpPacket(99, 1, 20), UnknownSender},
		{"unknown port", netip.MustParseAddrPort("10.20.0.5:61001"), mediaPort, rtpPacket(1, 1, 20), UnknownSender},
		{"rtcp feedback", from, mediaPort, []byte{0x81, 205, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1}, RTCPToAgent},
		{"short rtp", from, mediaPort, []byte{0x80, 96, 0, 1, 0, 0, 0, 1}, Malformed},
		{"extension cut off", from, mediaPort, shortExt, Malformed},
		{"extension past the end", from, mediaPort, longExt, Malformed},
		{"padding past the header", from, mediaPort, badPad, Malformed},
		{"version 1", from, mediaPort, append([]byte{0x40}, rtpPacket(1, 1, 20)[1:]...), Other},
		{"dtls", from, mediaPort, []byte{22, 0xfe, 0xfd, 0, 0, 0, 0}, Other},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: c.src, Dst: netip.AddrPortFrom(sfu.Addr(), c.dport), TTL: 57, DF: true, Payload: c.payload}.Marshal()
			before := r.outcomes()
			ret, out, clones := r.run(in)
			if ret != tcActUnspec || !bytes.Equal(out, in) || len(clones) != 0 {
				t.Errorf("verdict %d, frame changed %v, %d clones: want it passed untouched", ret, !bytes.Equal(out, in), len(clones))
			}
			after := r.outcomes()
			for o := range after {
				want := uint64(0)
				if o == c.want {
					want = 1
				}
				if got := after[o].Packets - before[o].Packets; got != want {
					t.Errorf("%v counted %d times, want %d", o, got, want)
				}
			}
		})
	}
	// Not for the SFU's media socket, or not for this host at all (another
	// address passing through, another port, a frame seen only because the
	// interface is promiscuous): the kernel would not deliver it to the
	// SFU, so the data plane leaves it alone, not even counted.
	otherMAC := append(net.HardwareAddr(nil), r.in.HardwareAddr...)
	otherMAC[5] ^= 1
	for name, in := range map[string][]byte{
		"another port":    frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: netip.AddrPortFrom(sfu.Addr(), 40001), TTL: 57, Payload: rtpPacket(1, 1, 20)}.Marshal(),
		"another address": frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: netip.MustParseAddrPort("10.20.2.99:40000"), TTL: 57, Payload: rtpPacket(1, 1, 20)}.Marshal(),
		"another host":    frame.UDP{SrcMAC: senderMAC, DstMAC: otherMAC, Src: from, Dst: sfu, TTL: 57, Payload: rtpPacket(1, 1, 20)}.Marshal(),
	} {
		before := r.outcomes()
		if ret, out, clones := r.run(in); ret != tcActUnspec || !bytes.Equal(out, in) || len(clones) != 0 {
			t.Errorf("%s: verdict %d, frame changed %v, %d clones", name, ret, !bytes.Equal(out, in), len(clones))
		}
		for o, c := range r.outcomes() {
			if c.Packets != before[o].Packets {
				t.Errorf("%s counted as %v", name, o)
			}
		}
	}
}

// A joined sender's address arriving where the kernel would refuse it (on
// an interface it is not routed through, or a martian source) is left to
// the kernel, untouched and counted: the data plane relays nothing the
// stack would drop.
func TestRefusesWhatTheKernelWould(t *testing.T) {
	r := newRig(t)
	sfu := netip.AddrPortFrom(sfuV4, mediaPort)
	from, martian := netip.MustParseAddrPort("10.20.0.5:61000"), netip.MustParseAddrPort("127.0.0.1:61000")
	testenv.Must(t, r.dp.SetStream(from, audio(1), r.receivers(false, 2)))
	testenv.Must(t, r.dp.SetStream(martian, audio(1), r.receivers(false, 2)))
	for _, c := range []struct {
		name    string
		ingress *net.Interface
		src     netip.AddrPort
	}{{"wrong interface", r.out, from}, {"martian", r.in, martian}} {
		in := frame.UDP{SrcMAC: senderMAC, DstMAC: c.ingress.HardwareAddr, Src: c.src, Dst: sfu, TTL: 57, DF: true, Payload: rtpPacket(1, 1, 20)}.Marshal()
		before := r.outcomes()
		ret, out, clones := r.runOn(c.ingress, in, true)
		if ret != tcActUnspec || !bytes.Equal(out, in) || len(clones) != 0 {
			t.Errorf("%s: verdict %d, frame changed %v, %d clones", c.name, ret, !bytes.Equal(out, in), len(clones))
		}
		if got := r.outcomes()[SourceRefused].Packets - before[SourceRefused].Packets; got != 1 {
			t.Errorf("%s: source_refused counted %d times", c.name, got)
		}
	}
	// The same sender on its own interface, after a refusal elsewhere.
	in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: rtpPacket(1, 1, 20)}.Marshal()
	if ret := r.verdict(in); ret != tcActRedirect {
		t.Errorf("the sender on its own interface: verdict %d", ret)
	}
}

// A receiver the kernel has no route to is skipped and counted; the others
// get their replicas, out of the interface and to the MAC address the
// kernel's tables give.
func TestSkipsReceiversWithoutRoute(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	rcv := r.receivers(false, 2)
	lost := Receiver{From: rcv[0].From, To: netip.MustParseAddrPort("10.99.0.1:5000"), TTL: 64} // no route
	testenv.Must(t, r.dp.SetStream(from, audio(1), []Receiver{rcv[0], lost, rcv[1]}))
	payload := rtpPacket(1, 1, 40)
	in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: payload}.Marshal()
	before := r.outcomes()
	ret, last, clones := r.run(in)
	if ret != tcActRedirect || len(clones) != 1 {
		t.Fatalf("verdict %d, %d clones; want a redirect and one clone", ret, len(clones))
	}
	requireFrame(t, "first", clones[0], r.expected(0, rcv[0], payload))
	requireFrame(t, "last", last, r.expected(1, rcv[1], payload))
	if got := r.outcomes()[NoRoute].Packets - before[NoRoute].Packets; got != 1 {
		t.Errorf("no_route counted %d times", got)
	}
}

// An skb carrying several datagrams (GSO, or merged by GRO) goes up to the
// stack untouched: one rewrite would not fit every segment.
func TestLeavesSegmentedSkbsToTheStack(t *testing.T) {
	r := newRig(t)
	from, sfu := netip.MustParseAddrPort("10.20.0.5:61000"), netip.AddrPortFrom(sfuV4, mediaPort)
	testenv.Must(t, r.dp.SetStream(from, audio(1), r.receivers(false, 2)))
	in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: rtpPacket(1, 1, 600)}.Marshal()
	before := r.outcomes()
	var ret uint32
	out := make([]byte, len(in)+64)
	testenv.Must(t, r.ns.Do(func() error {
		opts := &ebpf.RunOptions{Data: in, DataOut: out, Context: skBuff{IngressIfindex: uint32(r.in.Index),
			Ifindex: uint32(r.in.Index), GSOSegs: 2, GSOSize: 300}}
		var err error
		ret, err = r.dp.Program().Run(opts)
		out = opts.DataOut
		return err
	}))
	if ret != tcActUnspec || !bytes.Equal(out, in) {
		t.Errorf("segmented skb: verdict %d, frame changed %v", ret, !bytes.Equal(out, in))
	}
	if got := r.outcomes()[Segmented].Packets - before[Segmented].Packets; got != 1 {
		t.Errorf("segmented counted %d times", got)
	}
}

// A stream can be replaced and removed; its entries go with it.
func TestStreamLifecycle(t *testing.T) {
	r := newRig(t)
	from := netip.MustParseAddrPort("10.20.0.5:61000")
	sfu := netip.AddrPortFrom(sfuV4, mediaPort)
	rcv := r.receivers(false, 3)
	testenv.Must(t, r.dp.SetStream(from, audio(1, 2), rcv))
	testenv.Must(t, r.dp.SetStream(from, audio(2), rcv[:1])) // one SSRC and one receiver left
	send := func(ssrc uint32) (uint32, int) {
		in := frame.UDP{SrcMAC: senderMAC, DstMAC: r.in.HardwareAddr, Src: from, Dst: sfu, TTL: 57, DF: true, Payload: rtpPacket(ssrc, 1, 20)}.Marshal()
		ret, _, clones := r.run(in)
		return ret, len(clones)
	}
	if ret, n := send(1); ret != tcActUnspec || n != 0 {
		t.Errorf("a dropped SSRC: verdict %d, %d clones", ret, n)
	}
	if ret, n := send(2); ret != tcActRedirect || n != 0 {
		t.Errorf("one receiver left: verdict %d, %d clones", ret, n)
	}
	testenv.Must(t, r.dp.RemoveStream(from))
	if ret, n := send(2); ret != tcActUnspec || n != 0 {
		t.Errorf("after removal: verdict %d, %d clones", ret, n)
	}
	if err := r.dp.RemoveStream(from); err == nil {
		t.Error("removed a stream twice")
	}
	// Bad receivers are refused with the field named.
	bad := rcv[0]
	bad.To = netip.MustParseAddrPort("[fd20:2::1]:5000")
	if err := r.dp.SetStream(from, audio(1), []Receiver{bad}); err == nil {
		t.Error("an IPv6 receiver of an IPv4 sender was accepted")
	}
	if err := r.dp.SetStream(from, nil, rcv); err == nil {
		t.Error("a stream without SSRCs was accepted")
	}
	if err := r.dp.SetStream(from, audio(1), make([]Receiver, MaxFanout+1)); err == nil {
		t.Error("more receivers than a fanout holds were accepted")
	}
	var n int
	testenv.Must(t, r.ns.Do(func() error {
		it := r.dp.objs.SendersV4.Iterate()
		var k sfuSenderKeyV4
		var v sfuSender
		for it.Next(&k, &v) {
			n++
		}
		return it.Err()
	}))
	if n != 0 {
		t.Errorf("%d sender entries left after removal and refusals", n)
	}
}

func (r *rig) outcomes() map[Outcome]Counter {
	r.t.Helper()
	o, err := r.dp.Outcomes()
	testenv.Must(r.t, err)
	return o
}

func requireFrame(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if _, err := frame.Parse(got); err != nil {
		t.Errorf("%s does not parse: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs\n got % x\nwant % x", what, got, want)
	}
}

// audio is sources of these SSRCs that are never held back.
func audio(ssrcs ...uint32) []Source {
	out := make([]Source, len(ssrcs))
	for i, s := range ssrcs {
		out[i] = Source{SSRC: s}
	}
	return out
}
