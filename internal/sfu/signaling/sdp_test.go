package signaling

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pion/sdp/v3"

	"github.com/ebrtc/ebrtc/internal/sfu/secure"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

// chromiumOffer is Chromium 156's offer for a send-only PeerConnection
// (synth.ChromiumOffer).
func chromiumOffer(t *testing.T) string {
	t.Helper()
	return synth.ChromiumOffer
}

var sfuICE = ICE{Ufrag: "sfu0", Pwd: "0123456789abcdefghijkl",
	Candidates: []netip.AddrPort{netip.MustParseAddrPort("10.201.1.1:40000"), netip.MustParseAddrPort("[fd00:201:1::1]:40000")}}

// What the SFU keeps of Chromium's offer: Opus and AV1, their feedback but
// transport-cc (the extension stays: legs rewrite it), the media SSRCs
// but retransmission ones (the RTX SSRC and payload type are offered to
// receivers instead).
func TestParsePublishKeepsWhatTheDataPlaneHonours(t *testing.T) {
	p, err := ParsePublish(chromiumOffer(t), DefaultCodecs)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Media) != 2 || p.Media[0].Kind != "audio" || p.Media[1].Kind != "video" || !p.AllowMixed {
		t.Fatalf("publish %+v", p)
	}
	audio, video := p.Media[0], p.Media[1]
	if audio.PayloadType != 111 || video.PayloadType != 45 || audio.Mid != "0" || video.Mid != "1" {
		t.Errorf("payload types %d, %d; mids %q, %q", audio.PayloadType, video.PayloadType, audio.Mid, video.Mid)
	}
	for _, m := range p.Media {
		if len(m.SSRCs) != 1 {
			t.Errorf("%s: SSRCs %v", m.Kind, m.SSRCs)
		}
		for _, a := range m.Codec {
			if strings.Contains(a.Value, "transport-cc") {
				t.Errorf("%s kept %v", m.Kind, a)
			}
		}
		if m.ExtensionID(TransportCCURI) != 3 {
			t.Errorf("%s: transport-wide sequence number extension %d, want Chromium's 3", m.Kind, m.ExtensionID(TransportCCURI))
		}
	}
	// Chromium's offer pairs the AV1 SSRC with an RTX one (FID) on payload type 46 (apt=45).
	if video.RTXPayloadType != 46 || video.RTXSSRC == 0 || video.RTXSSRC == video.SSRCs[0] || audio.RTXPayloadType != 0 {
		t.Errorf("video RTX %d/%d, audio %d", video.RTXPayloadType, video.RTXSSRC, audio.RTXPayloadType)
	}
	if !slices.ContainsFunc(video.ExtMaps, func(a sdp.Attribute) bool { return strings.Contains(a.Value, "dependency-descriptor") }) {
		t.Error("the AV1 dependency descriptor extension was not kept")
	}
	if id := video.ExtensionID(DependencyDescriptorURI); id != synth.DDExtensionID || audio.ExtensionID(DependencyDescriptorURI) != 0 {
		t.Errorf("dependency descriptor extension id %d, want %d (and none for audio)", id, synth.DDExtensionID)
	}
	if !slices.ContainsFunc(video.Codec, func(a sdp.Attribute) bool { return a.Value == "45 nack pli" }) {
		t.Errorf("video feedback %v lacks nack pli", video.Codec)
	}
}

// The answer and a receiver's offer: ICE-lite, the SFU's candidates, the
// publisher's mids and payload types, receive-only and send-only, the
// video's RTX payload type in both (the publisher's RTX answered, the
// SFU's offered), and the publisher's SSRCs only in the receiver's offer,
// with the RTX SSRC; transport-cc feedback.
func TestDescriptionsTheSFUSends(t *testing.T) {
	p, err := ParsePublish(chromiumOffer(t), DefaultCodecs)
	if err != nil {
		t.Fatal(err)
	}
	p.StartKbps = 800
	for _, c := range []struct {
		name      string
		build     func(ICE) (string, error)
		direction string
		ssrcs     bool
	}{{"answer", p.Answer, "recvonly", false}, {"receiver offer", p.ReceiverOffer, "sendonly", true}} {
		text, err := c.build(sfuICE)
		if err != nil {
			t.Fatal(err)
		}
		var s sdp.SessionDescription
		if err := s.UnmarshalString(text); err != nil {
			t.Fatalf("%s does not parse: %v\n%s", c.name, err, text)
		}
		if _, ok := s.Attribute("ice-lite"); !ok {
			t.Errorf("%s: not ICE-lite", c.name)
		}
		for i, md := range s.MediaDescriptions {
			m := p.Media[i]
			mid, _ := md.Attribute("mid")
			_, dirOK := md.Attribute(c.direction)
			_, hasSSRC := md.Attribute("ssrc")
			cands := 0
			for _, a := range md.Attributes {
				if a.Key == "candidate" {
					cands++
				}
			}
			formats := []string{itoa(m.PayloadType)}
			if m.Kind == "video" {
				formats = append(formats, itoa(m.RTXPayloadType))
				if !m.PublisherRTX {
					t.Errorf("the publisher's RTX (%d) not taken", m.RTXPayloadType)
				}
			}
			fb := slices.ContainsFunc(md.Attributes, func(a sdp.Attribute) bool { return a.Value == itoa(m.PayloadType)+" transport-cc" })
			// The publisher is told its start estimate (the answer's video fmtp only).
			start := slices.ContainsFunc(md.Attributes, func(a sdp.Attribute) bool {
				return a.Key == "fmtp" && strings.HasPrefix(a.Value, itoa(m.PayloadType)+" ") && strings.HasSuffix(a.Value, ";x-google-start-bitrate=800")
			})
			if start != (!c.ssrcs && m.Kind == "video") {
				t.Errorf("%s, section %d: x-google-start-bitrate %v", c.name, i, start)
			}
			group := slices.ContainsFunc(md.Attributes, func(a sdp.Attribute) bool { return a.Key == "ssrc-group" })
			if mid != m.Mid || !dirOK || hasSSRC != c.ssrcs || cands != 2 || !slices.Equal(md.MediaName.Formats, formats) ||
				!fb || group != (c.ssrcs && m.Kind == "video") {
				t.Errorf("%s, section %d:\n%s", c.name, i, text)
			}
		}
	}
	if _, err := p.Answer(ICE{Ufrag: "x", Pwd: "y"}); err == nil {
		t.Error("an answer without usable ICE credentials")
	}
}

// Descriptions the SFU cannot serve are refused with the reason.
func TestParsePublishRefuses(t *testing.T) {
	offer := chromiumOffer(t)
	for name, c := range map[string]struct {
		offer  string
		codecs Codecs
		want   string
	}{
		"encrypted without a fingerprint": {strings.ReplaceAll(offer, "RTP/AVPF", "UDP/TLS/RTP/SAVPF"), DefaultCodecs, "without a=fingerprint"},
		"profiles mixed":                  {strings.Replace(encryptedOffer(t, "actpass"), "UDP/TLS/RTP/SAVPF", "RTP/AVPF", 1), DefaultCodecs, "mix"},
		"two setup roles":                 {strings.Replace(encryptedOffer(t, "actpass"), "a=setup:actpass", "a=setup:active", 1), DefaultCodecs, "setup"},
		"bad fingerprint":                 {strings.Replace(encryptedOffer(t, "actpass"), "a=fingerprint:sha-256 ", "a=fingerprint:sha-256 00:", 1), DefaultCodecs, "fingerprint"},
		"other profile":                   {strings.ReplaceAll(offer, "RTP/AVPF", "RTP/AVP"), DefaultCodecs, "profile RTP/AVP"},
		"codec not there":                 {offer, Codecs{Audio: "opus", Video: "H265"}, "H265 not offered"},
		"send and receive":                {strings.ReplaceAll(offer, "a=sendonly", "a=sendrecv"), DefaultCodecs, "send-only"},
		"too large":                       {offer + strings.Repeat("a=x:y\r\n", MaxSDPSize/7), DefaultCodecs, "at most"},
		"garbage":                         {"hello", DefaultCodecs, "description"},
		"not bundled":                     {strings.Replace(offer, "a=group:BUNDLE 0 1", "a=group:BUNDLE 0", 1), DefaultCodecs, "BUNDLE"},
		"two video sections": {strings.Replace(offer, "a=group:BUNDLE 0 1", "a=group:BUNDLE 0 1 2", 1) +
			strings.Replace(offer[strings.Index(offer, "m=video"):], "a=mid:1", "a=mid:2", 1), DefaultCodecs, "one video"},
	} {
		if _, err := ParsePublish(c.offer, c.codecs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}
}

// Whatever a participant sends, ParsePublish refuses it or yields
// descriptions that parse.
func FuzzParsePublish(f *testing.F) {
	f.Add(synth.ChromiumOffer)
	f.Fuzz(func(t *testing.T, offer string) {
		p, err := ParsePublish(offer, DefaultCodecs)
		if err != nil {
			return
		}
		for _, build := range []func(ICE) (string, error){p.Answer, p.ReceiverOffer} {
			text, err := build(sfuICE)
			if err != nil {
				continue
			}
			var s sdp.SessionDescription
			if err := s.UnmarshalString(text); err != nil {
				t.Fatalf("built a description that does not parse: %v", err)
			}
		}
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

// encryptedOffer is Chromium's offer as it ships: each section DTLS-SRTP
// with its certificate's fingerprint and the setup role given.
func encryptedOffer(t *testing.T, setup string) string {
	t.Helper()
	o := strings.ReplaceAll(chromiumOffer(t), "RTP/AVPF", "UDP/TLS/RTP/SAVPF")
	return strings.ReplaceAll(o, "a=mid:", "a=fingerprint:"+browserFingerprint+"\r\na=setup:"+setup+"\r\na=mid:")
}

const browserFingerprint = "sha-256 8F:2B:3A:81:0C:61:8B:3B:FE:8F:3A:55:21:4C:31:9F:3E:62:CC:6E:11:3B:D0:8C:45:5B:DF:0E:A3:B5:A2:79"

// An encrypted offer: its fingerprint (once, though every section says
// it) and setup role are read; the SFU answers with its own fingerprint,
// DTLS-SRTP and setup passive (active to a passive offer), and offers
// receivers actpass; a plain offer to an encrypted SFU, an encrypted one
// to a plain SFU, and roles RFC 8842 does not allow are refused, saying
// why.
func TestSecurityOfTheDescriptions(t *testing.T) {
	fp, _ := secure.ParseFingerprint(browserFingerprint)
	for _, setup := range []string{"actpass", "active", "passive", "holdconn"} {
		p, err := ParsePublish(encryptedOffer(t, setup), DefaultCodecs)
		if err != nil {
			t.Fatal(err)
		}
		if !p.Security.Encrypted() || len(p.Security.Fingerprints) != 1 || p.Security.Fingerprints[0] != fp || p.Security.Setup != setup {
			t.Errorf("%s: security %+v", setup, p.Security)
		}
		if err := p.Security.Check(true, true); (err == nil) != (setup != "holdconn") {
			t.Errorf("offer with setup %s: %v", setup, err)
		}
		if err := p.Security.Check(false, true); err == nil || !strings.Contains(err.Error(), "plain RTP") {
			t.Errorf("encrypted offer to a plain SFU: %v", err)
		}
		if p.Security.SFUIsClient() != (setup == "passive") {
			t.Errorf("offer with setup %s: the SFU a client: %v", setup, p.Security.SFUIsClient())
		}
		if a, err := p.Answer(ICE{Ufrag: "sfu0", Pwd: sfuICE.Pwd, Candidates: sfuICE.Candidates, Fingerprint: fp}); err != nil ||
			!strings.Contains(a, "a=setup:"+map[bool]string{true: "active", false: "passive"}[setup == "passive"]+"\r\n") {
			t.Errorf("answer to setup %s: %v\n%s", setup, err, a)
		}
	}
	plain, err := ParsePublish(chromiumOffer(t), DefaultCodecs)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.Security.Check(true, true); err == nil || !strings.Contains(err.Error(), "encryption switched off") {
		t.Errorf("plain offer to an encrypted SFU: %v", err)
	}
	if err := plain.Security.Check(false, true); err != nil {
		t.Errorf("plain offer to a plain SFU: %v", err)
	}
	for setup, ok := range map[string]bool{"active": true, "passive": true, "actpass": false, "": false} {
		if err := (Security{Fingerprints: []secure.Fingerprint{fp}, Setup: setup}).Check(true, false); (err == nil) != ok {
			t.Errorf("an answer with setup %q: %v", setup, err)
		}
	}
	p, _ := ParsePublish(encryptedOffer(t, "actpass"), DefaultCodecs)
	sfu, _ := secure.ParseFingerprint("sha-256 " + strings.Repeat("AB:", 31) + "AB")
	ice := sfuICE
	ice.Fingerprint = sfu
	for _, c := range []struct {
		name, setup string
		describe    func(ICE) (string, error)
	}{{"answer", "passive", p.Answer}, {"receiver offer", "actpass", p.ReceiverOffer}} {
		text, err := c.describe(ice)
		if err != nil {
			t.Fatal(err)
		}
		var d sdp.SessionDescription
		if err := d.UnmarshalString(text); err != nil {
			t.Fatal(err)
		}
		for i, md := range d.MediaDescriptions {
			f, _ := md.Attribute("fingerprint")
			setup, _ := md.Attribute("setup")
			if strings.Join(md.MediaName.Protos, "/") != "UDP/TLS/RTP/SAVPF" || f != sfu.String() || setup != c.setup {
				t.Errorf("%s, section %d: %v fingerprint %q setup %q", c.name, i, md.MediaName.Protos, f, setup)
			}
			if _, cryptex := md.Attribute("cryptex"); cryptex {
				t.Errorf("%s offers cryptex: the SFU reads header extensions", c.name)
			}
		}
	}
}
