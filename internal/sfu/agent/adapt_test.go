package agent

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/pion/rtcp"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
)

// A receiver's NACK names its own numbers: the sender is asked for its
// numbers behind them, and numbers with none behind them are left out.
func TestNACKsTranslatedToTheSendersNumbers(t *testing.T) {
	now := time.Unix(0, 0)
	f, out := newFeedback(t, &now)
	f.cfg.Original = func(sender, r netip.AddrPort, n uint16) (uint16, bool) {
		if sender != senderA || r != slow || n == 102 {
			return 0, false
		}
		return n + 1000, true // the receiver missed a thousand dropped packets
	}
	f.SetPath(slow, Path{Sender: senderA, Via: viaA})
	nack := &rtcp.TransportLayerNack{SenderSSRC: 1, MediaSSRC: 2, Nacks: rtcp.NackPairsFromSequenceNumbers([]uint16{100, 101, 102, 117})}
	b, _ := rtcp.Marshal([]rtcp.Packet{nack})
	if err := f.Handle(b, slow); err != nil {
		t.Fatal(err)
	}
	if len(*out) != 1 {
		t.Fatalf("%d sent", len(*out))
	}
	got := (*out)[0].pkts[0].(*rtcp.TransportLayerNack)
	var seqs []uint16
	for _, p := range got.Nacks {
		seqs = append(seqs, p.PacketList()...)
	}
	if !slices.Equal(seqs, []uint16{1100, 1101, 1117}) || got.MediaSSRC != 2 {
		t.Errorf("sender asked for %v of SSRC %d", seqs, got.MediaSSRC)
	}
	// Nothing left to ask for: nothing sent.
	nack.Nacks = rtcp.NackPairsFromSequenceNumbers([]uint16{102})
	b, _ = rtcp.Marshal([]rtcp.Packet{nack})
	_ = f.Handle(b, slow)
	if len(*out) != 1 {
		t.Errorf("a NACK of nothing known went out")
	}
}

// layerPlane is a data plane's rate adaptation: fixed per-target byte
// counts growing at fixed rates, and the targets set.
type layerPlane struct {
	ls      dataplane.Layers
	rates   []uint64 // bytes per second per target
	targets map[netip.AddrPort]int
}

func (p *layerPlane) Layers(netip.AddrPort) (dataplane.Layers, error) {
	ls := p.ls
	ls.Receivers = nil
	for _, r := range p.ls.Receivers {
		r.Target = p.targets[r.To]
		ls.Receivers = append(ls.Receivers, r)
	}
	return ls, nil
}

func (p *layerPlane) SetTarget(_, to netip.AddrPort, target int) error {
	p.targets[to] = target
	return nil
}

func (p *layerPlane) advance(d time.Duration) {
	for t := range p.ls.Bytes {
		p.ls.Bytes[t] += p.rates[t] * uint64(d) / uint64(time.Second)
	}
}

// Each receiver gets the highest target its estimate fits (every layer
// while it has sent none), the fast one stays on everything; an up-switch
// that waits for a switch point draws one key frame request.
func TestAdapterFollowsEachReceiversEstimate(t *testing.T) {
	now := time.Unix(0, 0)
	f, out := newFeedback(t, &now)
	plane := &layerPlane{ls: dataplane.Layers{Targets: 3, Bytes: make([]uint64, 3),
		Receivers: []dataplane.ReceiverLayers{{To: fast, Target: -1}, {To: slow, Target: -1}, {To: receiver, Target: -1}}},
		rates: []uint64{20e3, 30e3, 40e3}, targets: map[netip.AddrPort]int{fast: -1, slow: -1, receiver: -1}} // 160, 240, 320 kbit/s
	a := NewAdapter(plane, f, 0)
	remb := func(r netip.AddrPort, bps float32) {
		f.SetPath(r, Path{Sender: senderA, Via: viaA})
		b, _ := rtcp.Marshal([]rtcp.Packet{&rtcp.ReceiverEstimatedMaximumBitrate{Bitrate: bps, SSRCs: []uint32{2}}})
		if err := f.Handle(b, r); err != nil {
			t.Fatal(err)
		}
	}
	for range 20 { // 5 s
		remb(fast, 1e6)
		remb(slow, 150e3)
		now = now.Add(250 * time.Millisecond)
		plane.advance(250 * time.Millisecond)
		if err := a.Adapt(now, senderA, viaA, 2); err != nil {
			t.Fatal(err)
		}
	}
	if plane.targets[fast] != -1 || plane.targets[slow] != 0 || plane.targets[receiver] != -1 {
		t.Fatalf("targets %v: want fast every layer, slow 0, the silent one every layer", plane.targets)
	}
	before := len(*out)
	plane.ls.Receivers[1].SwitchWaiting = time.Second
	if err := a.Adapt(now, senderA, viaA, 2); err != nil {
		t.Fatal(err)
	}
	if len(*out) != before+1 {
		t.Fatalf("%d packets sent for a waiting up-switch, want one PLI", len(*out)-before)
	}
	if _, ok := (*out)[before].pkts[0].(*rtcp.PictureLossIndication); !ok {
		t.Errorf("sent %T, want a PLI", (*out)[before].pkts[0])
	}
}
