package agent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/pion/rtcp"
)

type sent struct {
	pkts    []rtcp.Packet
	to, via netip.AddrPort
}

var (
	senderA  = netip.MustParseAddrPort("10.0.0.1:5000")
	senderB  = netip.MustParseAddrPort("10.0.0.2:5000")
	viaA     = netip.MustParseAddrPort("10.0.9.9:40000")
	fast     = netip.MustParseAddrPort("10.0.1.1:6000")
	slow     = netip.MustParseAddrPort("10.0.1.2:6000")
	receiver = netip.MustParseAddrPort("10.0.1.3:6000")
)

func newFeedback(t *testing.T, now *time.Time) (*Feedback, *[]sent) {
	t.Helper()
	var out []sent
	f, err := NewFeedback(FeedbackConfig{Now: func() time.Time { return *now }, Send: func(p []byte, to, via netip.AddrPort) error {
		pkts, err := rtcp.Unmarshal(p)
		if err != nil {
			t.Fatalf("sent RTCP does not parse: %v", err)
		}
		out = append(out, sent{pkts, to, via})
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	return f, &out
}

func marshal(t *testing.T, pkts ...rtcp.Packet) []byte {
	t.Helper()
	b, err := rtcp.Marshal(pkts)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// NACKs go to the receiver's sender as they are, from the SFU's address on
// the sender's connection; receiver reports stay with the agent.
func TestFeedbackRoutesNACKs(t *testing.T) {
	now := time.Unix(0, 0)
	f, out := newFeedback(t, &now)
	f.SetPath(receiver, Path{Sender: senderA, Via: viaA})
	nack := &rtcp.TransportLayerNack{SenderSSRC: 9, MediaSSRC: 1, Nacks: []rtcp.NackPair{{PacketID: 100, LostPackets: 3}}}
	must(t, f.Handle(marshal(t, &rtcp.ReceiverReport{SSRC: 9}, nack), receiver))
	if len(*out) != 1 || (*out)[0].to != senderA || (*out)[0].via != viaA || len((*out)[0].pkts) != 1 {
		t.Fatalf("sent %+v", *out)
	}
	if got := (*out)[0].pkts[0].(*rtcp.TransportLayerNack); got.MediaSSRC != 1 || got.Nacks[0] != nack.Nacks[0] {
		t.Errorf("NACK changed: %+v", got)
	}
	if f.Handle(marshal(t, nack), netip.MustParseAddrPort("10.9.9.9:1")) == nil {
		t.Error("feedback from a transport that receives nothing was routed")
	}
	if f.Handle([]byte{0x80, 1, 2}, receiver) == nil {
		t.Error("garbage was routed")
	}
}

// However many receivers ask, a sender gets one PLI (or FIR) per media
// SSRC and interval.
func TestFeedbackDeduplicatesPLIs(t *testing.T) {
	now := time.Unix(0, 0)
	f, out := newFeedback(t, &now)
	f.SetPath(fast, Path{Sender: senderA, Via: viaA})
	f.SetPath(slow, Path{Sender: senderA, Via: viaA})
	pli := func(ssrc uint32) []byte {
		return marshal(t, &rtcp.PictureLossIndication{SenderSSRC: 9, MediaSSRC: ssrc})
	}
	must(t, f.Handle(pli(1), fast))
	must(t, f.Handle(pli(1), slow))                                                                                                // same sender and SSRC: dropped
	must(t, f.Handle(pli(2), slow))                                                                                                // another SSRC: goes
	must(t, f.Handle(marshal(t, &rtcp.FullIntraRequest{SenderSSRC: 9, FIR: []rtcp.FIREntry{{SSRC: 1, SequenceNumber: 1}}}), slow)) // counts as a PLI: dropped
	if len(*out) != 2 {
		t.Fatalf("%d PLIs sent, want 2", len(*out))
	}
	now = now.Add(500 * time.Millisecond)
	must(t, f.Handle(pli(1), slow))
	if len(*out) != 3 {
		t.Errorf("no PLI after the interval")
	}
}

// The SFU's own key-frame requests share the receivers' deduplication.
func TestRequestKeyFrame(t *testing.T) {
	now := time.Unix(0, 0)
	f, out := newFeedback(t, &now)
	f.SetPath(receiver, Path{Sender: senderA, Via: viaA})
	must(t, f.RequestKeyFrame(senderA, viaA, 1))
	must(t, f.Handle(marshal(t, &rtcp.PictureLossIndication{SenderSSRC: 9, MediaSSRC: 1}), receiver)) // within the interval
	if len(*out) != 1 || (*out)[0].to != senderA || (*out)[0].via != viaA {
		t.Fatalf("sent %+v", *out)
	}
	if p, ok := (*out)[0].pkts[0].(*rtcp.PictureLossIndication); !ok || p.MediaSSRC != 1 {
		t.Errorf("sent %+v, want a PLI for SSRC 1", (*out)[0].pkts)
	}
}

// Each sender hears only its best downlink's REMB: a slow receiver does not
// drag the sender down, and when the best one leaves, the next best speaks.
func TestFeedbackForwardsTheBestREMB(t *testing.T) {
	now := time.Unix(0, 0)
	f, out := newFeedback(t, &now)
	f.SetPath(fast, Path{Sender: senderA, Via: viaA})
	f.SetPath(slow, Path{Sender: senderA, Via: viaA})
	remb := func(bps float32) []byte {
		return marshal(t, &rtcp.ReceiverReport{SSRC: 9}, &rtcp.ReceiverEstimatedMaximumBitrate{SenderSSRC: 9, Bitrate: bps, SSRCs: []uint32{1}})
	}
	forwarded := func() []float32 {
		var bps []float32
		for _, s := range *out {
			for _, p := range s.pkts {
				if r, ok := p.(*rtcp.ReceiverEstimatedMaximumBitrate); ok {
					bps = append(bps, r.Bitrate)
				}
			}
		}
		return bps
	}
	for range 5 {
		must(t, f.Handle(remb(2e6), fast))
		must(t, f.Handle(remb(3e5), slow))
	}
	for _, b := range forwarded() {
		if b != 2e6 {
			t.Fatalf("forwarded REMBs %v: the slow receiver's reached the sender", forwarded())
		}
	}
	if len(forwarded()) != 5 {
		t.Fatalf("forwarded %d REMBs, want the fast receiver's 5", len(forwarded()))
	}
	// One raw dip of the best receiver reaches the sender smoothed.
	must(t, f.Handle(remb(1e6), fast))
	if got := forwarded(); got[len(got)-1] != 1.7e6 {
		t.Fatalf("a dip to 1e6 forwarded as %v, want the smoothed 1.7e6", got[len(got)-1])
	}
	f.RemovePath(fast)
	must(t, f.Handle(remb(3e5), slow))
	if got := forwarded(); got[len(got)-1] != 3e5 {
		t.Errorf("after the best receiver left, forwarded %v", got)
	}
	// Another sender's receivers do not compete.
	f.SetPath(receiver, Path{Sender: senderB, Via: viaA})
	n := len(forwarded())
	must(t, f.Handle(remb(1e5), receiver))
	if len(forwarded()) != n+1 || (*out)[len(*out)-1].to != senderB {
		t.Errorf("sender B's only receiver was not heard")
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Whatever a receiver sends, Handle routes or refuses it; it never panics,
// and what it sends parses.
func FuzzFeedback(f *testing.F) {
	t := &testing.T{}
	f.Add(marshal(t, &rtcp.ReceiverReport{SSRC: 9}, &rtcp.ReceiverEstimatedMaximumBitrate{SenderSSRC: 9, Bitrate: 1e6, SSRCs: []uint32{1}}))
	f.Add(marshal(t, &rtcp.PictureLossIndication{SenderSSRC: 9, MediaSSRC: 1}))
	f.Add(marshal(t, &rtcp.TransportLayerNack{SenderSSRC: 9, MediaSSRC: 1, Nacks: []rtcp.NackPair{{PacketID: 1}}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		now := time.Unix(0, 0)
		fb, _ := newFeedback(t, &now)
		fb.SetPath(receiver, Path{Sender: senderA, Via: viaA})
		_ = fb.Handle(b, receiver)
	})
}
