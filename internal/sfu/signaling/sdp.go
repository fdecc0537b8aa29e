// Package signaling is the SFU's controller side of WebRTC: the session
// descriptions that keep each participant in a peer-to-peer illusion with
// the SFU as the peer (Scallop, section 5.1).
package signaling

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/pion/sdp/v3"
)

// MaxSDPSize bounds a description a participant may send.
const MaxSDPSize = 64 << 10

// Codecs choose the one codec per kind the SFU negotiates (by rtpmap
// name, case-insensitive): every receiver must decode what the sender
// sends, and the data plane forwards it untouched.
type Codecs struct {
	Audio, Video string
}

// DefaultCodecs: Opus, and AV1 (whose dependency descriptor carries the
// temporal layers rate adaptation drops).
var DefaultCodecs = Codecs{Audio: "opus", Video: "AV1"}

// ICE is the SFU's side of one PeerConnection's ICE: its credentials and
// its host candidates (one per address family).
type ICE struct {
	Ufrag, Pwd string
	Candidates []netip.AddrPort
}

// Publish is a participant's send-only description, reduced to what the
// SFU forwards: one codec per section, its feedback and header extensions
// but none the data plane cannot honour yet (transport-cc, rtx, red,
// ulpfec, flexfec, rtcp-xr).
type Publish struct {
	RemoteUfrag, RemotePwd string
	AllowMixed             bool // a=extmap-allow-mixed: two-byte extensions (the AV1 DD needs them)
	Media                  []*Media
}

// Media is one m-section of a Publish.
type Media struct {
	Kind        string // "audio" or "video"
	Mid         string
	PayloadType int
	Codec       []sdp.Attribute // rtpmap, fmtp and rtcp-fb of the chosen payload type
	ExtMaps     []sdp.Attribute
	SSRCs       []uint32        // the media SSRCs (not retransmission ones)
	SSRCLines   []sdp.Attribute // a=ssrc lines of those SSRCs (cname, msid)
	Msid        string
}

// DependencyDescriptorURI names the AV1 dependency descriptor extension.
const DependencyDescriptorURI = "https://aomediacodec.github.io/av1-rtp-spec/#dependency-descriptor-rtp-header-extension"

// ExtensionID is the id the section maps the header extension uri to (0:
// not negotiated).
func (m *Media) ExtensionID(uri string) uint8 {
	for _, a := range m.ExtMaps {
		id, rest, _ := strings.Cut(a.Value, " ")
		if u, _, _ := strings.Cut(rest, " "); u == uri {
			id, _, _ = strings.Cut(id, "/") // an id may carry a direction
			if n, err := strconv.Atoi(id); err == nil && n > 0 && n < 256 {
				return uint8(n)
			}
		}
	}
	return 0
}

// Stripped header extensions and feedback: the data plane does not rewrite
// transport-wide sequence numbers or answer their feedback.
var (
	strippedExtensions = []string{"transport-wide-cc", "rtp-stream-id", "repaired-rtp-stream-id", "video-layers-allocation"}
	strippedCodecs     = []string{"rtx", "red", "ulpfec", "flexfec-03"}
)

// ParsePublish reads a participant's offer for its send-only
// PeerConnection. The profile must be plain RTP (RTP/AVPF: the browser
// runs with encryption off); each section must be send-only, in the
// BUNDLE group, and offer the chosen codec.
func ParsePublish(offer string, codecs Codecs) (*Publish, error) {
	if len(offer) > MaxSDPSize {
		return nil, fmt.Errorf("signaling: description of %d bytes, at most %d", len(offer), MaxSDPSize)
	}
	var s sdp.SessionDescription
	if err := s.UnmarshalString(offer); err != nil {
		return nil, fmt.Errorf("signaling: description: %w", err)
	}
	p := &Publish{}
	_, p.AllowMixed = s.Attribute("extmap-allow-mixed")
	bundle, _ := s.Attribute("group")
	if len(s.MediaDescriptions) == 0 || len(s.MediaDescriptions) > 16 {
		return nil, fmt.Errorf("signaling: %d media sections, want 1 to 16", len(s.MediaDescriptions))
	}
	for i, md := range s.MediaDescriptions {
		m, err := parseMedia(md, codecs)
		if err != nil {
			return nil, fmt.Errorf("signaling: media section %d: %w", i, err)
		}
		if !slices.Contains(strings.Fields(strings.TrimPrefix(bundle, "BUNDLE")), m.Mid) {
			return nil, fmt.Errorf("signaling: media section %d (mid %q) is not in the BUNDLE group", i, m.Mid)
		}
		ufrag, pwd := attr(md, &s, "ice-ufrag"), attr(md, &s, "ice-pwd")
		if ufrag == "" || pwd == "" || (p.RemoteUfrag != "" && (ufrag != p.RemoteUfrag || pwd != p.RemotePwd)) {
			return nil, fmt.Errorf("signaling: media section %d: missing or different ICE credentials", i)
		}
		p.RemoteUfrag, p.RemotePwd = ufrag, pwd
		p.Media = append(p.Media, m)
	}
	// The data plane keeps one key-frame gate per sender: one video stream.
	if videos := slices.IndexFunc(p.Media, func(m *Media) bool { return m.Kind == "video" }); videos >= 0 &&
		slices.ContainsFunc(p.Media[videos+1:], func(m *Media) bool { return m.Kind == "video" }) {
		return nil, errors.New("signaling: more than one video section (the SFU forwards one video stream per participant)")
	}
	return p, nil
}

func attr(md *sdp.MediaDescription, s *sdp.SessionDescription, key string) string {
	if v, ok := md.Attribute(key); ok {
		return v
	}
	v, _ := s.Attribute(key)
	return v
}

func parseMedia(md *sdp.MediaDescription, codecs Codecs) (*Media, error) {
	m := &Media{Kind: md.MediaName.Media}
	want := map[string]string{"audio": codecs.Audio, "video": codecs.Video}[m.Kind]
	if want == "" {
		return nil, fmt.Errorf("kind %q (want audio or video)", m.Kind)
	}
	if strings.Join(md.MediaName.Protos, "/") != "RTP/AVPF" {
		return nil, fmt.Errorf("profile %s: the SFU forwards plain RTP only (RTP/AVPF; start the browser with encryption off)",
			strings.Join(md.MediaName.Protos, "/"))
	}
	if _, ok := md.Attribute("sendonly"); !ok {
		return nil, errors.New("not send-only (one send-only PeerConnection per participant)")
	}
	var ok bool
	if m.Mid, ok = md.Attribute("mid"); !ok || m.Mid == "" {
		return nil, errors.New("no mid")
	}
	m.PayloadType = -1
	for _, a := range md.Attributes {
		if a.Key != "rtpmap" {
			continue
		}
		pt, name, _ := strings.Cut(a.Value, " ")
		if codec, _, _ := strings.Cut(name, "/"); strings.EqualFold(codec, want) {
			if m.PayloadType, _ = strconv.Atoi(pt); m.PayloadType > 0 {
				break
			}
		}
	}
	if m.PayloadType <= 0 || !slices.Contains(md.MediaName.Formats, strconv.Itoa(m.PayloadType)) {
		return nil, fmt.Errorf("%s not offered", want)
	}
	pt := strconv.Itoa(m.PayloadType)
	for _, a := range md.Attributes {
		switch a.Key {
		case "rtpmap", "fmtp", "rtcp-fb":
			if p, rest, _ := strings.Cut(a.Value, " "); p == pt && !(a.Key == "rtcp-fb" && rest == "transport-cc") {
				m.Codec = append(m.Codec, a)
			}
		case "extmap":
			if !containsAny(a.Value, strippedExtensions) {
				m.ExtMaps = append(m.ExtMaps, a)
			}
		case "msid":
			m.Msid = a.Value
		}
	}
	return m, m.parseSSRCs(md)
}

// parseSSRCs keeps the media SSRCs: those not named second in an
// ssrc-group:FID (retransmission) or FEC-FR group.
func (m *Media) parseSSRCs(md *sdp.MediaDescription) error {
	repair := map[uint32]bool{}
	for _, a := range md.Attributes {
		if a.Key != "ssrc-group" {
			continue
		}
		f := strings.Fields(a.Value)
		if len(f) >= 3 && (f[0] == "FID" || f[0] == "FEC-FR") {
			for _, s := range f[2:] {
				if v, err := strconv.ParseUint(s, 10, 32); err == nil {
					repair[uint32(v)] = true
				}
			}
		}
	}
	for _, a := range md.Attributes {
		if a.Key != "ssrc" {
			continue
		}
		id, _, _ := strings.Cut(a.Value, " ")
		v, err := strconv.ParseUint(id, 10, 32)
		if err != nil {
			return fmt.Errorf("a=ssrc:%s: %w", a.Value, err)
		}
		if repair[uint32(v)] {
			continue
		}
		if !slices.Contains(m.SSRCs, uint32(v)) {
			m.SSRCs = append(m.SSRCs, uint32(v))
		}
		m.SSRCLines = append(m.SSRCLines, a)
	}
	if len(m.SSRCs) != 1 {
		return fmt.Errorf("%d media SSRCs, want 1 (no simulcast)", len(m.SSRCs))
	}
	return nil
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Answer is the SFU's answer to the publisher: the same sections,
// receive-only, with the one codec and what is kept of its feedback and
// extensions; the SFU as an ICE-lite endpoint.
func (p *Publish) Answer(ice ICE) (string, error) {
	return p.describe(ice, "recvonly", false)
}

// ReceiverOffer is the SFU's offer to a receiver for its receive-only
// PeerConnection towards this publisher: the publisher's own description
// (mids, payload types, extension ids, SSRCs, msid), send-only from the
// SFU, so the receiver's browser sees the sender's stream as if direct.
func (p *Publish) ReceiverOffer(ice ICE) (string, error) {
	return p.describe(ice, "sendonly", true)
}

func (p *Publish) describe(ice ICE, direction string, withSSRCs bool) (string, error) {
	if len(ice.Ufrag) < 4 || len(ice.Pwd) < 22 || len(ice.Candidates) == 0 {
		return "", errors.New("signaling: ICE needs a ufrag (>= 4), a password (>= 22) and a candidate")
	}
	s, err := sdp.NewJSEPSessionDescription(false)
	if err != nil {
		return "", err
	}
	s.Origin.UnicastAddress = "0.0.0.0"
	var mids []string
	for _, m := range p.Media {
		mids = append(mids, m.Mid)
	}
	s.WithValueAttribute("group", "BUNDLE "+strings.Join(mids, " "))
	if p.AllowMixed {
		s.WithPropertyAttribute("extmap-allow-mixed")
	}
	s.WithValueAttribute("msid-semantic", " WMS")
	s.WithPropertyAttribute("ice-lite")
	for _, m := range p.Media {
		md := &sdp.MediaDescription{
			MediaName: sdp.MediaName{Media: m.Kind, Port: sdp.RangedPort{Value: 9},
				Protos: []string{"RTP", "AVPF"}, Formats: []string{strconv.Itoa(m.PayloadType)}},
			ConnectionInformation: &sdp.ConnectionInformation{NetworkType: "IN", AddressType: "IP4",
				Address: &sdp.Address{Address: "0.0.0.0"}},
		}
		md.WithValueAttribute("rtcp", "9 IN IP4 0.0.0.0")
		md.WithICECredentials(ice.Ufrag, ice.Pwd)
		md.WithValueAttribute("mid", m.Mid)
		md.Attributes = append(md.Attributes, m.ExtMaps...)
		md.WithPropertyAttribute(direction)
		if withSSRCs && m.Msid != "" {
			md.WithValueAttribute("msid", m.Msid)
		}
		md.WithPropertyAttribute("rtcp-mux")
		md.WithPropertyAttribute("rtcp-rsize")
		md.Attributes = append(md.Attributes, m.Codec...)
		if withSSRCs {
			md.Attributes = append(md.Attributes, m.SSRCLines...)
		}
		for i, c := range ice.Candidates {
			md.WithCandidate(fmt.Sprintf("%d 1 udp %d %s %d typ host", i+1, 2130706431-i, c.Addr().Unmap(), c.Port()))
		}
		md.WithPropertyAttribute("end-of-candidates")
		s.WithMedia(md)
	}
	b, err := s.Marshal()
	if err != nil {
		return "", fmt.Errorf("signaling: marshal: %w", err)
	}
	return string(b), nil
}

// RemoteUfrag is the ICE username fragment of a receiver's answer (the
// same in every section), which its connectivity checks will carry.
func RemoteUfrag(answer string) (string, error) {
	if len(answer) > MaxSDPSize {
		return "", fmt.Errorf("signaling: description of %d bytes, at most %d", len(answer), MaxSDPSize)
	}
	var s sdp.SessionDescription
	if err := s.UnmarshalString(answer); err != nil {
		return "", fmt.Errorf("signaling: description: %w", err)
	}
	ufrag := ""
	for i, md := range s.MediaDescriptions {
		u := attr(md, &s, "ice-ufrag")
		if u == "" || (ufrag != "" && u != ufrag) {
			return "", fmt.Errorf("signaling: media section %d: missing or different ICE username fragment", i)
		}
		ufrag = u
	}
	if ufrag == "" {
		return "", errors.New("signaling: an answer without media sections")
	}
	return ufrag, nil
}
