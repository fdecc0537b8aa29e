package sfu

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// TestSimulcastReceiver: three participants (DTLS-SRTP and no WebRTC
// switch on the user data plane; plain RTP on the eBPF one, Chromium
// only), P1 publishing its 640x360 camera as
// two encodings (RFC 8853: 320 and 640 wide, VP8), P2 and P3 one each:
// P1 is Chromium (its encodings with temporal layers, L1T3, and the
// dependency descriptor) or Firefox ESR (neither: each encoding whole);
// P2 and P3 are Chromium. P3's downlink is shaped to carry P1's low
// encoding and not its high one (lowEncodingShaper): the SFU must move P3
// to P1's low encoding (switched at its key frame, rewritten into the one
// stream P3 knows), which P3 plays on without a long freeze; P2, whose
// link is clear, keeps P1's high encoding with nothing changed (frames,
// bytes, no freeze, no duplicate); lifted, P3 is back on the high
// encoding within 10 s.
func TestSimulcastReceiver(t *testing.T) {
	for _, c := range []struct{ p1, plane string }{{"chromium", "user"}, {"firefox", "user"}, {"chromium", "ebpf"}} {
		name := c.p1
		if c.plane == "ebpf" { // (plain RTP: Firefox has no switch for it)
			name += "-ebpf"
		}
		t.Run(name, func(t *testing.T) { simulcastReceiver(t, c.p1, c.plane) })
	}
}

func simulcastReceiver(t *testing.T, p1Browser, plane string) {
	bed := newRateBed(t, func(cfg *Config) {
		cfg.Codecs = signaling.Codecs{Audio: "opus", Video: "VP8"}
		if plane == "user" { // DTLS-SRTP; the eBPF plane (the bed's own) forwards plain RTP
			cfg.Dataplane, cfg.Ifaces, cfg.Unencrypted = "user", nil, false
		}
	})
	// (Its low encoding capped at a quarter of its high one's 250 kbit/s:
	// the fake cameras' pictures are so simple that each encoding's rate
	// is what its content needs, Firefox's 90-130 kbit/s for both.)
	bed.p1Query, bed.p1Browser = "&simulcast=2&video=640x360", p1Browser
	if p1Browser == "firefox" {
		testenv.RequireCommand(t, "firefox-esr")
	}
	const (
		unshaped   = 10 * time.Second
		shaped     = 18 * time.Second
		settle     = 8 * time.Second // (as TestShapedReceiver's: a Firefox receiver froze 3.2 s once moving down, 6 s in)
		lifted     = 12 * time.Second
		within     = 10 * time.Second
		cameraBack = 12 * time.Second // (after its 2 s off)
	)
	var unshape func() error
	res := bed.run(t, []ratePhase{
		// (Until P1's high encoding has ramped up well apart from its low
		// one: the baseline below is then a sender in its steady state,
		// not its start, when an encoding comes late or ramps up.)
		{Name: "ramp", Apply: func(b *rateBed, _ []phaseSeries) (string, func() error, error) {
			note, err := encodingsApart(b, b.ids, 20*time.Second)
			return note, func() error { return nil }, err
		}},
		{Name: "unshaped", Duration: unshaped},
		{Name: "shaped", Duration: shaped, Apply: func(b *rateBed, _ []phaseSeries) (string, func() error, error) {
			kbit, why, err := lowEncodingShaper(b, b.ids)
			if err != nil {
				return "", nil, err
			}
			unshape, err = testbed.ShapeWith(b.tb.Server, b.p3Link, testbed.Shaper{Kbit: kbit, Burst: "8kb", Latency: "200ms"})
			return fmt.Sprintf("tbf %d kbit/s on %s: %s", kbit, b.p3Link, why), func() error { return unshape() }, err
		}, Report: func(b *rateBed) string { return legsReport(b) }},
		{Name: "lifted", Duration: lifted},
		// P1's camera off and on again, as its user does: it must come
		// back at the size its encodings were set for (the page reopened
		// it at 320x180, which made its top encoding 320 wide).
		{Name: "camera again", Duration: cameraBack, Apply: func(b *rateBed, _ []phaseSeries) (string, func() error, error) {
			b.senders.Command("camera 0 off")
			time.Sleep(2 * time.Second)
			b.senders.Command("camera 0 on")
			return "P1's camera off for 2 s, then on", func() error { return nil }, nil
		}},
	})
	res.log(t)
	if kernel, ok := bed.plane.(*dataplane.DataPlane); ok {
		kernelForwarded(t, kernel)
	}
	before, during, after, again := res.Phases[1], res.Phases[2], res.Phases[3], res.Phases[4]
	judged := during.after(settle)
	p1 := res.IDs[0]
	top := before.Outbound(0)
	if n := before.Samples[0][len(before.Samples[0])-1].Outbound["video"].Encodings; n < 2 || top.FPS < 5 {
		t.Fatalf("P1 sent %v encodings at %.1f fps (want 2)", n, top.FPS)
	}
	for p := 1; p < 3; p++ {
		if in := before.Inbound(p, p1); in.FrameWidth != 640 || in.FPS < 0.8*top.FPS {
			t.Errorf("unshaped: P%d got P1 %v wide at %.1f fps (want the high encoding, 640, at %.1f)", p+1, in.FrameWidth, in.FPS, top.FPS)
		}
	}
	play := judged.Playing(2, p1)
	if in := judged.Inbound(2, p1); in.FrameWidth != 320 || play.SlowerThan(3) || play.LongestFreeze > 1 || play.Pauses > 0 {
		t.Errorf("shaped: P3 got P1 %v wide (want the low encoding, 320) at %.1f fps (want 3 or more), longest freeze %.2f s, %v pauses",
			in.FrameWidth, play.FPS, play.LongestFreeze, play.Pauses)
	}
	// Nobody else notices: P2 keeps the high encoding, and its share of
	// what P1 sends of it, as before (against P1's own output over the
	// same phase: Firefox's encoder moved from 146 to 116 kbit/s on its
	// own in one run).
	was, now := before.Inbound(1, p1), during.Inbound(1, p1)
	sentBefore, sent := before.Outbound(0), during.Outbound(0)
	fps, kbps := now.FPS/max(sent.FPS, 1), now.Kbps/max(sent.VideoKbps, 1)
	// (P2 gets no more frames than P1 sends: a share above 1 is P1's
	// frame rate read low in its window, in one run 12.8 against the 15
	// P2 got; taken as all of them.)
	fpsBefore, kbpsBefore := min(was.FPS/max(sentBefore.FPS, 1), 1), was.Kbps/max(sentBefore.VideoKbps, 1)
	withLoss, _ := during.FreezesWithLoss(1, p1)
	if now.FrameWidth != 640 || fps < 0.9*fpsBefore || kbps < 0.8*kbpsBefore || kbps > 1.25*kbpsBefore || withLoss > 0 || now.Pauses > 0 {
		t.Errorf("shaped: P2 got P1 %v wide at %.1f fps, %.0f kbit/s of the %.1f and %.0f sent, %v freezes with loss, %v pauses; before %.1f fps, %.0f kbit/s of %.1f and %.0f",
			now.FrameWidth, now.FPS, now.Kbps, sent.FPS, sent.VideoKbps, withLoss, now.Pauses, was.FPS, was.Kbps, sentBefore.FPS, sentBefore.VideoKbps)
	}
	if dups := res.duplicates(1, p1); dups != "" {
		t.Errorf("P2 from P1 got duplicates: %s", dups)
	}
	if back := after.after(within).Inbound(2, p1); back.FrameWidth != 640 || back.FPS < 0.8*top.FPS {
		t.Errorf("lifted: P3 got P1 %v wide at %.1f fps %v after (want 640 at %.1f)", back.FrameWidth, back.FPS, within, 0.8*top.FPS)
	}
	last := again.Samples[0][len(again.Samples[0])-1].Outbound["video"]
	for p := 1; p < 3; p++ {
		if back := again.Inbound(p, p1); back.FrameWidth != 640 || last.TrackWidth != 640 {
			t.Errorf("camera on again: P%d got P1 %v wide (want 640); P1's track %v wide, its encodings %q", p+1, back.FrameWidth, last.TrackWidth, last.EncodingWidths)
		}
	}
}

// kernelForwarded: the eBPF plane's program, not its slow path, replicated
// the simulcast video (the slow path learns each encoding's SSRC from its
// first packets) and kept each receiver to its encoding.
func kernelForwarded(t *testing.T, d *dataplane.DataPlane) {
	all, err := d.Outcomes()
	if err != nil {
		t.Fatal(err)
	}
	slow := d.SlowPath()
	inKernel := func(o dataplane.Outcome) uint64 { return all[o].Packets - slow[o].Packets }
	t.Logf("replicas: %d by the program, %d by the slow path; other encodings' packets withheld: %d by the program, %d by the slow path",
		inKernel(dataplane.Replica), slow[dataplane.Replica].Packets, inKernel(dataplane.OtherEncoding), slow[dataplane.OtherEncoding].Packets)
	if inKernel(dataplane.Replica) < 20*slow[dataplane.Replica].Packets || inKernel(dataplane.OtherEncoding) == 0 {
		t.Error("the simulcast video was not forwarded by the program")
	}
}

// encodingsApart waits (up to within) until P1 sends its high encoding
// whole (640 wide: its uplink estimate has room for it) and the SFU's
// status has it at 1.6 times the low one or more: the sender's steady
// state, not its start.
func encodingsApart(b *rateBed, ids [3]string, within time.Duration) (string, error) {
	start := time.Now()
	for {
		p1, _, _, err := simulcastRates(b, ids)
		out := b.p1Latest()
		wide := out.Outbound["video"].FrameWidth == 640
		if err == nil && wide && len(p1) >= 2 && p1[len(p1)-1] >= 1.6*p1[len(p1)-2] {
			v := out.Outbound["video"]
			return fmt.Sprintf("P1's encodings %.0f and %.0f kbit/s after %v (%s of a track %v wide; limited for %v s)", p1[len(p1)-2]/1000, p1[len(p1)-1]/1000,
				time.Since(start).Round(100*time.Millisecond), v.EncodingWidths, v.TrackWidth, v.QualityLimitationDurations), nil
		}
		if time.Since(start) > within {
			v := out.Outbound["video"]
			return "", fmt.Errorf("after %v, P1's encodings %v bit/s (%v), its top one %v wide of a track %v wide (encodings %q; limited by %q, for %v s), its uplink estimate %.0f kbit/s: not its steady state",
				within, p1, err, v.FrameWidth, v.TrackWidth, v.EncodingWidths, v.QualityLimitationReason, v.QualityLimitationDurations, out.Pub.AvailableOutgoingBitrate/1000)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// simulcastRates are P1's and P2's targets' rates and their audio's
// (both), from the SFU's status, on the wire.
func simulcastRates(b *rateBed, ids [3]string) (p1, p2 []float64, audio float64, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := admin.Fetch(ctx, b.admin)
	if err != nil {
		return nil, nil, 0, err
	}
	for _, room := range st.Rooms {
		for _, p := range room.Participants {
			switch p.ID {
			case ids[0]:
				p1, audio = p.LayerBPS, audio+p.OtherBPS
			case ids[1]:
				p2, audio = p.LayerBPS, audio+p.OtherBPS
			}
		}
	}
	return p1, p2, audio, nil
}

// lowEncodingShaper is a shaper's rate for P3's link that carries P1's
// low encoding whole beside P2's lowest layer and both streams' audio (at
// fitShare of it), and not P1's high encoding instead (at 90%, what the
// SFU gives media of its estimate): from the SFU's status, on the wire.
func lowEncodingShaper(b *rateBed, ids [3]string) (int, string, error) {
	p1, p2, audio, err := simulcastRates(b, ids)
	if err != nil {
		return 0, "", err
	}
	if len(p1) < 2 || len(p2) == 0 {
		return 0, "", fmt.Errorf("the SFU's status has P1's targets %v and P2's %v: want P1's two encodings", p1, p2)
	}
	low, high := p1[len(p1)-2], p1[len(p1)-1]
	kbit := int((audio + p2[0] + low) / fitShare / 1000)
	if need := (audio + p2[0] + high) / 0.9 / 1000; float64(kbit) >= need {
		return 0, "", fmt.Errorf("P1's encodings %.0f and %.0f kbit/s are too close to tell apart on a shaper (audio %.0f, P2's lowest %.0f)",
			low/1000, high/1000, audio/1000, p2[0]/1000)
	}
	return kbit, fmt.Sprintf("P1's low encoding %.0f kbit/s (high %.0f), P2's lowest layer %.0f, audio %.0f, at %.0f%%",
		low/1000, high/1000, p2[0]/1000, audio/1000, 100*fitShare), nil
}
