package sfu

import (
	"context"
	"encoding/binary"
	"flag"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

var (
	captureTo        = flag.String("capture", "", "TestCaptureChromiumStream writes the capture to this rtpdump file")
	captureSeconds   = flag.Int("capture-seconds", 12, "TestCaptureChromiumStream: how long the meeting lasts")
	captureSchedule  = flag.String("capture-schedule", "", "TestCaptureChromiumStream: the captured participant's encoder schedule (meeting.mjs's SCHEDULE, e.g. L1T3,L1T2,L1T3/2)")
	captureVideoOnly = flag.Bool("capture-video-only", false, "TestCaptureChromiumStream: keep only the video SSRC (the one with the dependency descriptor)")
)

// TestCaptureChromiumStream is a tool, not a check: it records what one
// headless Chromium participant of a two-party meeting sends the SFU (its
// RTP: Opus and AV1 with the dependency descriptor, 12 s) as an rtpdump
// file, the stream the synthetic senders replay. Run it with
//
//	sudo go test -count=1 -run TestCaptureChromiumStream ./internal/sfu -capture internal/testbed/synth/testdata/chromium-av1.rtpdump
//
// The stream of structure changes the dependency descriptor tests read
// (the encoder switched between scalability modes and resolutions, video
// only) is recorded with
//
//	sudo go test -count=1 -run TestCaptureChromiumStream ./internal/sfu -capture internal/testbed/synth/testdata/chromium-av1-switching.rtpdump \
//		-capture-seconds 24 -capture-schedule L1T3,L1T2,L1T3,L1T1,L1T3,L1T3/2 -capture-video-only
//
// The capture ends with the meeting, after the captured participant's
// reload: the rejoined page sends from another address and SSRCs, which
// are not kept.
func TestCaptureChromiumStream(t *testing.T) {
	if *captureTo == "" {
		t.Skip("a tool: give -capture FILE to record")
	}
	tb, _ := meetingSFU(t)
	type captured struct {
		from netip.AddrPort
		pkt  synth.Packet
	}
	var got []captured
	_, stderr := browserMeetingScheduled(t, tb, 2, *captureSeconds, *captureSchedule, func(meeting context.Context) {
		start := time.Now()
		err := readFrames(tb, meeting, func(frame []byte) {
			src, dport, payload, ok := ipv4UDP(frame)
			// RTP only (RFC 7983, 5761): the replay sends its own RTCP.
			if !ok || dport != testbed.SFUMedia.Port() || len(payload) < 12 || payload[0]>>6 != 2 || (payload[1] >= 192 && payload[1] <= 223) {
				return
			}
			got = append(got, captured{src, synth.Packet{At: time.Since(start), Data: append([]byte(nil), payload...)}})
		})
		if err != nil {
			t.Error(err)
		}
	})
	for _, line := range strings.Split(stderr, "\n") {
		if strings.HasPrefix(line, "schedule ") {
			t.Log(line)
		}
	}
	// The participant that joined first, from its first packet on: its
	// audio and video SSRCs (the video's alone with -capture-video-only).
	if len(got) == 0 {
		t.Fatal("nothing captured")
	}
	first := got[0].from
	ssrcs, video := map[uint32]int{}, uint32(0)
	var pkts []synth.Packet
	var origin time.Duration
	for _, c := range got {
		if c.from != first {
			continue
		}
		var h rtp.Header
		if _, err := h.Unmarshal(c.pkt.Data); err != nil {
			t.Fatalf("a packet from %v: %v", first, err)
		}
		ssrcs[h.SSRC]++
		if video == 0 && h.GetExtension(synth.DDExtensionID) != nil {
			video = h.SSRC
		}
		if *captureVideoOnly && h.SSRC != video {
			continue
		}
		if len(pkts) == 0 {
			origin = c.pkt.At
		}
		c.pkt.At -= origin
		pkts = append(pkts, c.pkt)
	}
	if len(ssrcs) > 2 || video == 0 || len(pkts) == 0 {
		t.Fatalf("packets by SSRC from %v: %v, video %08x; want one audio and one video SSRC", first, ssrcs, video)
	}
	f, err := os.Create(*captureTo)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := synth.WriteRTPDump(f, first, time.Now(), pkts); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d packets from %v over %v", len(pkts), first, pkts[len(pkts)-1].At)
}

// ipv4UDP reads an Ethernet frame's IPv4 UDP addressing and payload, not
// its checksum: the browsers' veths send partial ones.
func ipv4UDP(b []byte) (src netip.AddrPort, dport uint16, payload []byte, ok bool) {
	if len(b) < 14+20+8 || binary.BigEndian.Uint16(b[12:]) != 0x0800 || b[14+9] != 17 {
		return src, 0, nil, false
	}
	ihl := int(b[14]&0x0f) * 4
	udp := b[14+ihl:]
	if len(udp) < 8 || int(binary.BigEndian.Uint16(udp[4:])) > len(udp) {
		return src, 0, nil, false
	}
	src = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[14+12:14+16])), binary.BigEndian.Uint16(udp))
	return src, binary.BigEndian.Uint16(udp[2:]), udp[8:binary.BigEndian.Uint16(udp[4:])], true
}
