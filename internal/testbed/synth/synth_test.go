package synth

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/pion/rtp"

	"github.com/ebrtc/ebrtc/internal/sfu/secure"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
)

func TestRTPDumpRoundTrip(t *testing.T) {
	in := []Packet{{At: 0, Data: []byte{0x80, 96, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8}}, {At: 1500 * time.Millisecond, Data: []byte{0x80, 96, 0, 2, 9, 9, 9, 9, 5, 6, 7, 8, 42}}}
	var b bytes.Buffer
	if err := WriteRTPDump(&b, netip.MustParseAddrPort("10.0.0.1:5000"), time.Unix(1, 0), in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadRTPDump(&b)
	if err != nil || len(out) != 2 || out[1].At != in[1].At || !bytes.Equal(out[1].Data, in[1].Data) {
		t.Fatalf("%v %v", out, err)
	}
	if _, err := ReadRTPDump(bytes.NewReader([]byte("not a dump\n"))); err == nil {
		t.Error("read garbage")
	}
}

// A virtual sender's stream, over two passes of the capture: its own
// SSRCs, sequence numbers one apart per SSRC across the pass, timestamps
// and dependency descriptor frame numbers running on, payloads untouched.
func TestStreamRunsOnAcrossPasses(t *testing.T) {
	rec, err := Chromium()
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Packets) < 900 || rec.Span < 11*time.Second {
		t.Fatalf("capture: %d packets over %v", len(rec.Packets), rec.Span)
	}
	s := rec.NewStream(3)
	last := map[uint32]*rtp.Packet{}
	var lastFrame int = -1
	var lastAt time.Duration
	for k := range 2 * len(rec.Packets) {
		b, at, err := s.Packet(k)
		if err != nil {
			t.Fatal(err)
		}
		var p, orig rtp.Packet
		if err := p.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		_ = orig.Unmarshal(rec.Packets[k%len(rec.Packets)].Data)
		if p.SSRC != s.AudioSSRC && p.SSRC != s.VideoSSRC || !bytes.Equal(p.Payload, orig.Payload) || at < lastAt {
			t.Fatalf("packet %d: SSRC %#x, payload same %v, at %v after %v", k, p.SSRC, bytes.Equal(p.Payload, orig.Payload), at, lastAt)
		}
		lastAt = at
		if prev := last[p.SSRC]; prev != nil {
			if p.SequenceNumber != prev.SequenceNumber+1 || int32(p.Timestamp-prev.Timestamp) < 0 {
				t.Fatalf("packet %d (SSRC %#x): seq %d ts %d after seq %d ts %d", k, p.SSRC, p.SequenceNumber, p.Timestamp, prev.SequenceNumber, prev.Timestamp)
			}
		}
		last[p.SSRC] = &p
		if dd := p.GetExtension(DDExtensionID); len(dd) >= 3 && p.SSRC == s.VideoSSRC {
			n := int(binary.BigEndian.Uint16(dd[1:]))
			if lastFrame >= 0 && n != lastFrame && n != lastFrame+1 {
				t.Fatalf("packet %d: frame %d after %d", k, n, lastFrame)
			}
			lastFrame = n
		}
	}
	if other := rec.NewStream(4); other.AudioSSRC == s.AudioSSRC || other.VideoSSRC == s.VideoSSRC {
		t.Error("two virtual senders share an SSRC")
	}
}

// The SFU takes a virtual sender's offer, with the virtual SSRCs and the
// capture's payload types; a plain one negotiates neither NACKs nor
// transport-wide numbers.
func TestOfferIsOneTheSFUTakes(t *testing.T) {
	rec, err := Chromium()
	if err != nil {
		t.Fatal(err)
	}
	s := rec.NewStream(7)
	// parsed is our offer as the SFU reads it.
	parsed := func(plain bool, id *secure.Identity) (string, *signaling.Publish) {
		o, err := offer(newLocalICE(), s, plain, id)
		if err != nil {
			t.Fatal(err)
		}
		pub, err := signaling.ParsePublish(o, signaling.DefaultCodecs)
		if err != nil {
			t.Fatal(err)
		}
		return o, pub
	}
	for _, plain := range []bool{false, true} {
		_, pub := parsed(plain, nil)
		video := pub.Media[1]
		if nack, twcc := video.HasFeedback("nack"), video.ExtensionID(signaling.TransportCCURI) != 0; nack == plain || twcc == plain {
			t.Errorf("plain %v: nack %v, transport-wide numbers %v", plain, nack, twcc)
		}
		var got []uint32
		for _, m := range pub.Media {
			got = append(got, m.SSRCs...)
		}
		if want := []uint32{s.AudioSSRC, s.VideoSSRC}; !slices.Equal(got, want) {
			t.Errorf("SSRCs %v, want %v", got, want)
		}
		if video.PayloadType != int(rec.Video.PayloadType) || pub.Media[0].PayloadType != int(rec.Audio.PayloadType) {
			t.Errorf("payload types %d %d: not the capture's", pub.Media[0].PayloadType, video.PayloadType)
		}
	}
	// Encrypted, as a browser as it ships: the SFU reads our certificate's
	// fingerprint and actpass.
	id, err := secure.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	o, pub := parsed(false, id)
	if sec := pub.Security; !slices.Equal(sec.Fingerprints, []secure.Fingerprint{id.Fingerprint()}) || sec.Setup != "actpass" ||
		sec.Check(true, true) != nil {
		t.Errorf("encrypted offer: %+v (%v), want our fingerprint and actpass", sec, sec.Check(true, true))
	}
	remote, err := securityOf(o)
	if err != nil || remote.setup != "actpass" || len(remote.fingerprints) != 1 {
		t.Errorf("our own offer read back: %+v, %v", remote, err)
	}
	if _, err := securityOf(ChromiumOffer); err == nil {
		t.Error("a plain description read as one to encrypt with")
	}
}
