package offload

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// Where XDP runs in front of TC, a datagram whose egress takes no XDP frames
// goes to TC marked in the metadata, uncounted (TC counts it); without TC
// on the ingress it is the kernel's (no_egress_port). TC leaves alone, and
// does not count again, what XDP judged.
func TestXDPHandsUnsendableToTC(t *testing.T) {
	r := newRig(t)
	v4 := families["v4"]
	ch := channelFor(v4, v4, 0x4600)
	testenv.Must(t, r.engine.AddChannel(ch))
	in := r.from("cli0", frame.UDP{Src: ch.Client, Dst: ch.Server, Payload: frame.ChannelData(ch.Number, payload(100, 27), 0, 0)})
	register := func(iface string, a Attachment) { r.register(t, iface, a, r.ifs[iface].mac) }
	register("peer0", Attachment{TC: true}) // a veth whose peer runs no XDP

	register("cli0", Attachment{XDP: true, TC: true, XDPEgress: true})
	before := r.outcomes()
	ret, out := r.run("cli0", in)
	mark := binary.NativeEndian.AppendUint32(nil, 0xeb7c0001) // HOOK_META_TO_TC
	if ret != xdpPass || !bytes.Equal(out, append(mark, in...)) {
		t.Errorf("handed to TC: action %d, output % x", ret, out)
	}
	for o, c := range r.outcomes() {
		if c.Packets != before[o].Packets {
			t.Errorf("XDP counted %v for a datagram it handed to TC", o)
		}
	}

	r.tc = true
	before = r.outcomes()
	if ret, out := r.run("cli0", in); ret != xdpPass || !bytes.Equal(out, in) {
		t.Errorf("TC without XDP's mark: action %d, frame changed %v", ret, !bytes.Equal(out, in))
	}
	for o, c := range r.outcomes() {
		if c.Packets != before[o].Packets {
			t.Errorf("TC counted %v for a datagram XDP had judged", o)
		}
	}

	r.tc = false
	register("cli0", Attachment{XDP: true, XDPEgress: true}) // forced XDP: no TC behind it
	r.expectOutcome(SlowNoEgressPort, func() {
		if ret, out := r.run("cli0", in); ret != xdpPass || !bytes.Equal(out, in) {
			t.Errorf("no TC to hand to: action %d, frame changed %v", ret, !bytes.Equal(out, in))
		}
	})
}

// Segmented skbs (GSO, or merged by GRO) are the kernel's: one rewrite would
// not fit every segment.
func TestTCLeavesSegmentedSkbsToTheKernel(t *testing.T) {
	r := newRig(t)
	r.tc = true
	v4 := families["v4"]
	ch := channelFor(v4, v4, 0x4601)
	testenv.Must(t, r.engine.AddChannel(ch))
	in := r.from("peer0", frame.UDP{Src: ch.Peer, Dst: ch.Relay, Payload: payload(1000, 28)})
	idx := uint32(r.ifs["peer0"].index)
	r.expectOutcome(SlowGSO, func() {
		testenv.Must(t, r.ns.Do(func() error {
			out := make([]byte, len(in)+64)
			opts := &ebpf.RunOptions{Data: in, DataOut: out,
				Context: skBuff{IngressIfindex: idx, Ifindex: idx, GSOSegs: 2, GSOSize: 500}}
			ret, err := r.engine.ProgramTC().Run(opts)
			if err == nil && (ret != tcActUnspec || !bytes.Equal(opts.DataOut, in)) {
				t.Errorf("segmented skb: verdict %d, frame changed %v", ret, !bytes.Equal(opts.DataOut, in))
			}
			return err
		}))
	})
	// The same datagram unsegmented takes the fast path.
	r.expectOutcome(FastPeerToClient, func() { r.run("peer0", in) })
}

// XDP cannot tell a partial checksum (a local sender's, left to the device)
// from a full one, but its value gives it away: such a datagram goes to TC,
// which knows the skb's checksum state, or to the kernel where no TC runs.
func TestXDPLeavesPartialChecksumsToTC(t *testing.T) {
	r := newRig(t)
	for _, name := range []string{"v4", "v6"} {
		f := families[name]
		ch := channelFor(f, f, 0x4602)
		testenv.Must(t, r.engine.AddChannel(ch))
		in := r.from("cli0", frame.UDP{Src: ch.Client, Dst: ch.Server, PartialChecksum: true,
			Payload: frame.ChannelData(ch.Number, payload(300, 29), 0, 0)})
		register := func(a Attachment) {
			a.Index = r.ifs["cli0"].index
			testenv.Must(t, r.engine.registerIface(a, r.ifs["cli0"].mac))
		}
		register(Attachment{XDP: true, XDPEgress: true}) // no TC behind XDP
		r.expectOutcome(SlowChecksumOffload, func() {
			if ret, out := r.run("cli0", in); ret != xdpPass || !bytes.Equal(out, in) {
				t.Errorf("%s: partial checksum without TC: action %d, frame changed %v", name, ret, !bytes.Equal(out, in))
			}
		})
		register(Attachment{XDP: true, TC: true, XDPEgress: true})
		before := r.outcomes()
		ret, out := r.run("cli0", in)
		mark := binary.NativeEndian.AppendUint32(nil, 0xeb7c0001)
		if ret != xdpPass || !bytes.Equal(out, append(mark, in...)) {
			t.Errorf("%s: partial checksum with TC behind: action %d, output % x", name, ret, out)
		}
		for o, c := range r.outcomes() {
			if c.Packets != before[o].Packets {
				t.Errorf("%s: XDP counted %v for a datagram it handed to TC", name, o)
			}
		}
		testenv.Must(t, r.engine.RemoveChannel(ch))
	}
}

// The path a route caches per CPU (next hop, and what the interfaces table
// said of its ingress and egress) lives only while the table is unchanged:
// an egress that stops taking XDP frames, or an ingress MAC that changes,
// applies to the very next datagram, not when the cached path expires.
func TestCachedPathFollowsInterfaceChanges(t *testing.T) {
	r := newRig(t)
	v4 := families["v4"]
	ch := channelFor(v4, v4, 0x4602)
	testenv.Must(t, r.engine.AddChannel(ch))
	in := r.from("cli0", frame.UDP{Src: ch.Client, Dst: ch.Server, Payload: frame.ChannelData(ch.Number, payload(100, 29), 0, 0)})
	register := func(iface string, a Attachment, mac []byte) { r.register(t, iface, a, mac) }
	register("cli0", Attachment{XDP: true, XDPEgress: true}, r.ifs["cli0"].mac)
	register("peer0", Attachment{XDP: true, XDPEgress: true}, r.ifs["peer0"].mac)
	r.expectOutcome(FastClientToPeer, func() { r.run("cli0", in) })

	register("peer0", Attachment{XDP: true}, r.ifs["peer0"].mac) // no longer takes XDP frames
	r.expectOutcome(SlowNoEgressPort, func() {
		if ret, out := r.run("cli0", in); ret != xdpPass || !bytes.Equal(out, in) {
			t.Errorf("egress without XDP: action %d, frame changed %v", ret, !bytes.Equal(out, in))
		}
	})
	register("peer0", Attachment{XDP: true, XDPEgress: true}, r.ifs["peer0"].mac)
	r.expectOutcome(FastClientToPeer, func() { r.run("cli0", in) })

	other := bytes.Clone(r.ifs["cli0"].mac)
	other[5] ^= 0x01
	register("cli0", Attachment{XDP: true, XDPEgress: true}, other) // the frame's MAC is not ours now
	r.expectOutcome(PassOtherHost, func() {
		if ret, out := r.run("cli0", in); ret != xdpPass || !bytes.Equal(out, in) {
			t.Errorf("frame for another MAC: action %d, frame changed %v", ret, !bytes.Equal(out, in))
		}
	})
}
