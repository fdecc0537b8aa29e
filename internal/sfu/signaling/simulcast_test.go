package signaling

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// simulcastOffer is Chromium's offer with its video sent as encodings
// (as Chromium writes RID simulcast: a=rid lines and a=simulcast, and no
// a=ssrc lines for the video); firefox adds Firefox's a=ssrc line per
// encoding, and its "rid=" form the old way.
func simulcastOffer(t *testing.T, sim string, firefox bool) string {
	t.Helper()
	var out []string
	video := false
	for _, l := range strings.Split(strings.ReplaceAll(chromiumOffer(t), "\r\n", "\n"), "\n") {
		if strings.HasPrefix(l, "m=") {
			video = strings.HasPrefix(l, "m=video")
		}
		if video && (strings.HasPrefix(l, "a=ssrc") || strings.HasPrefix(l, "a=ssrc-group")) {
			continue
		}
		out = append(out, l)
		if video && l == "a=mid:1" {
			out = append(out, "a=rid:q send", "a=rid:h send", "a=rid:f send", "a=simulcast:"+sim)
			if firefox {
				out = append(out, "a=ssrc:11 cname:{ff}", "a=ssrc:12 cname:{ff}", "a=ssrc:13 cname:{ff}")
			}
		}
	}
	return strings.Join(out, "\r\n")
}

// A simulcast offer: its encodings lowest first, the stream id extension
// kept (the SFU learns the encodings' SSRCs from it), an SSRC of the
// SFU's for receivers. The answer takes every encoding; a receiver's
// offer has one stream (the SFU's SSRC, no stream ids).
func TestSimulcastOffer(t *testing.T) {
	for _, c := range []struct {
		sim     string
		firefox bool
		want    string
	}{
		{"send q;h;f", false, "q h f"},
		{"send q;~h;f", false, "q f"},
		{"send rid=q;h;f", true, "q h f"},
		{"send q,h;f", false, "q f"},
	} {
		p, err := ParsePublish(simulcastOffer(t, c.sim, c.firefox), DefaultCodecs)
		if err != nil {
			t.Fatalf("%s: %v", c.sim, err)
		}
		video := p.Media[1]
		if got := strings.Join(video.RIDs, " "); got != c.want || !p.Simulcast() {
			t.Errorf("%s: encodings %q, want %q", c.sim, got, c.want)
		}
		if video.ExtensionID(RIDURI) != 10 || len(video.SSRCs) != 1 || video.SSRCs[0] == 11 || p.Media[0].ExtensionID(RIDURI) != 0 {
			t.Errorf("%s: stream id extension %d (want Chromium's 10), SSRCs %v (want one of the SFU's)", c.sim, video.ExtensionID(RIDURI), video.SSRCs)
		}
		answer, err := p.Answer(sfuICE)
		if err != nil {
			t.Fatal(err)
		}
		want := "a=simulcast:recv " + strings.ReplaceAll(c.want, " ", ";")
		if !strings.Contains(answer, want) || !strings.Contains(answer, "a=rid:"+c.want[:1]+" recv") || !strings.Contains(answer, RIDURI) {
			t.Errorf("%s: the answer does not take the encodings (%s):\n%s", c.sim, want, answer)
		}
		offer, err := p.ReceiverOffer(sfuICE)
		if err != nil {
			t.Fatal(err)
		}
		ssrc := "a=ssrc:" + strconv.FormatUint(uint64(video.SSRCs[0]), 10) + " cname:"
		if strings.Contains(offer, "simulcast") || strings.Contains(offer, "a=rid") || strings.Contains(offer, RIDURI) || !strings.Contains(offer, ssrc) {
			t.Errorf("%s: a receiver's offer is not one stream under %s:\n%s", c.sim, ssrc, offer)
		}
	}
}

// What cannot be simulcast is refused, saying why.
func TestSimulcastRefused(t *testing.T) {
	for _, c := range []struct{ sim, why string }{
		{"send q;h;x", "a=rid:x"},
		{"send q;q", "q"},
		{"recv q", "no send streams"},
		{"send ~q;~h", "0 encodings"},
	} {
		_, err := ParsePublish(simulcastOffer(t, c.sim, false), DefaultCodecs)
		if err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: %v, want an error naming %q", c.sim, err, c.why)
		}
	}
	noRID := strings.ReplaceAll(simulcastOffer(t, "send q;h", false), "a=extmap:10 "+RIDURI+"\r\n", "")
	if _, err := ParsePublish(noRID, DefaultCodecs); err == nil || !strings.Contains(err.Error(), "stream id extension") {
		t.Errorf("simulcast without the stream id extension: %v", err)
	}
}

// The offers Chromium 156 and Firefox ESR 153 make for a camera sent as
// three encodings (sendEncodings rids q, h, f; a 640x360 canvas, captured
// with createOffer): Chromium signals no SSRC for them, Firefox six (each
// encoding's and its RTX's), its extension ids with a direction.
func TestBrowsersSimulcastOffers(t *testing.T) {
	for _, c := range []struct {
		file  string
		codec string
		rid   uint8
	}{{"chromium-simulcast-offer.sdp", "AV1", 10}, {"firefox-simulcast-offer.sdp", "AV1", 9}} {
		b, err := os.ReadFile(filepath.Join("testdata", c.file))
		if err != nil {
			t.Fatal(err)
		}
		p, err := ParsePublish(string(b), Codecs{Audio: "opus", Video: c.codec})
		if err != nil {
			t.Fatalf("%s: %v", c.file, err)
		}
		video := p.Media[len(p.Media)-1]
		if strings.Join(video.RIDs, ";") != "q;h;f" || video.ExtensionID(RIDURI) != c.rid || len(video.SSRCs) != 1 ||
			video.ExtensionID(DependencyDescriptorURI) == 0 {
			t.Errorf("%s: encodings %v, stream id extension %d (want %d), SSRCs %v, descriptor %d", c.file, video.RIDs,
				video.ExtensionID(RIDURI), c.rid, video.SSRCs, video.ExtensionID(DependencyDescriptorURI))
		}
		// An extension offered with a direction is answered with the
		// mirror one (Firefox's "9/sendonly": the SFU receives it).
		answer, err := p.Answer(sfuICE)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(answer, "/sendonly "+RIDURI) || (c.rid == 9 && !strings.Contains(answer, "a=extmap:9/recvonly "+RIDURI)) {
			t.Errorf("%s: the answer's stream id extension is not the SFU's to receive:\n%s", c.file, answer)
		}
		// The encodings' RTX is taken (libwebrtc probes with it), each
		// named by its repaired stream id; a receiver gets neither id.
		rtx := fmt.Sprintf("a=fmtp:%d apt=%d", video.RTXPayloadType, video.PayloadType)
		if !video.PublisherRTX || !strings.Contains(answer, rtx) || video.ExtensionID(RRIDURI) == 0 || !strings.Contains(answer, RRIDURI) {
			t.Errorf("%s: the answer does not take the encodings' RTX (%s) and repaired stream id:\n%s", c.file, rtx, answer)
		}
		offer, err := p.ReceiverOffer(sfuICE)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(offer, RIDURI) || strings.Contains(offer, RRIDURI) {
			t.Errorf("%s: a receiver is offered a stream id:\n%s", c.file, offer)
		}
	}
}
