// Package signaling is the SFU's controller side of WebRTC: the session
// descriptions that keep each participant in a peer-to-peer illusion with
// the SFU as the peer (Scallop, section 5.1).
package signaling

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/pion/sdp/v3"

	"github.com/ebrtc/ebrtc/internal/sfu/secure"
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
	// Fingerprint is the SFU's certificate's, for DTLS-SRTP (zero: plain
	// RTP, --unencrypted-media).
	Fingerprint secure.Fingerprint
}

// Publish is a participant's send-only description, reduced to what the
// SFU forwards: one codec per section, its feedback and header extensions
// but none the data plane cannot honour (red, ulpfec, flexfec); rtx for
// video, which the data planes turn back into the packets it repairs. The
// transport-wide sequence number and its feedback stay: the SFU sends the
// publisher feedback on its uplink, each receiver's leg rewrites the
// number in its replicas, and the publisher's rate follows the SFU's REMB
// (its best downlink's estimate) as well.
type Publish struct {
	// StartKbps, if set, is the uplink estimate the answer tells the
	// publisher to start from (Chromium's x-google-start-bitrate on the
	// video codec; Firefox ignores it).
	StartKbps int

	RemoteUfrag, RemotePwd string
	Security               Security // its DTLS-SRTP, if it asked for it
	AllowMixed             bool     // a=extmap-allow-mixed: two-byte extensions (the AV1 DD needs them)
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
	// RTXPayloadType and RTXSSRC are the retransmission stream the SFU
	// offers receivers of video (RFC 4588): the publisher's own payload
	// type for it (else one free), and the SSRC its offer paired with the
	// media's (else a new one). The SFU answers receivers' NACKs from its
	// history.
	RTXPayloadType int
	RTXSSRC        uint32
	// PublisherRTX: the publisher offered RTX for the codec, and the answer
	// takes it (RTXPayloadType, and RTXSSRC unless simulcast: each
	// encoding's RTX is named by its repaired stream id). libwebrtc probes
	// its uplink with RTX padding; without it, its first probes often fail
	// (dataplane/rtx.go).
	PublisherRTX bool
	// RIDs are a simulcast video's encodings (RFC 8853), lowest first as
	// the offer lists them (none: one encoding). Their SSRCs are learnt
	// from the stream id extension as media arrives; SSRCs holds the
	// SFU's own, which receivers get whichever encoding they take.
	RIDs []string
}

// Simulcast says whether a section offers simulcast.
func (p *Publish) Simulcast() bool {
	return slices.ContainsFunc(p.Media, func(m *Media) bool { return len(m.RIDs) > 0 })
}

// HasFeedback says whether the chosen payload type negotiated the RTCP
// feedback fb ("nack", "nack pli", "transport-cc", ...).
func (m *Media) HasFeedback(fb string) bool {
	want := strconv.Itoa(m.PayloadType) + " " + fb
	return slices.ContainsFunc(m.Codec, func(a sdp.Attribute) bool { return a.Key == "rtcp-fb" && a.Value == want })
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

// AudioLevelURI names the client-to-mixer audio level extension (RFC
// 6464), which the data planes read for speakers.
const AudioLevelURI = "urn:ietf:params:rtp-hdrext:ssrc-audio-level"

// TransportCCURI names the transport-wide sequence number extension.
const TransportCCURI = "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"

// RIDURI names the RTP stream id extension (RFC 8852), which tells a
// simulcast video's encodings apart.
const RIDURI = "urn:ietf:params:rtp-hdrext:sdes:rtp-stream-id"

// Stripped header extensions: layers are the dependency descriptor's.
// The stream id and the repaired stream id stay for simulcast only, and
// only in the answer to the publisher (a receiver gets one stream).
var strippedExtensions = []string{"video-layers-allocation"}

// RRIDURI names the repaired stream id extension (RFC 8852), which tells
// which encoding a simulcast video's retransmission repairs.
const RRIDURI = "urn:ietf:params:rtp-hdrext:sdes:repaired-rtp-stream-id"

// streamIDs: the extension is one of the stream ids.
func streamIDs(extmap string) bool {
	return strings.Contains(extmap, RIDURI) || strings.Contains(extmap, RRIDURI)
}

// MaxEncodings is how many simulcast encodings a video may offer
// (layers.MaxEncodings).
const MaxEncodings = 4

// ParsePublish reads a participant's offer for its send-only
// PeerConnection: DTLS-SRTP or plain RTP (Security says which); each
// section must be send-only, in the BUNDLE group, and offer the chosen
// codec.
func ParsePublish(offer string, codecs Codecs) (*Publish, error) {
	if len(offer) > MaxSDPSize {
		return nil, fmt.Errorf("signaling: description of %d bytes, at most %d", len(offer), MaxSDPSize)
	}
	var s sdp.SessionDescription
	if err := s.UnmarshalString(offer); err != nil {
		return nil, fmt.Errorf("signaling: description: %w", err)
	}
	p := &Publish{}
	var err error
	if p.Security, err = securityOf(&s); err != nil {
		return nil, err
	}
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
	// The data plane keeps one key-frame gate per sender: one video stream
	// per connection (a screen comes on a connection of its own).
	if videos := slices.IndexFunc(p.Media, func(m *Media) bool { return m.Kind == "video" }); videos >= 0 &&
		slices.ContainsFunc(p.Media[videos+1:], func(m *Media) bool { return m.Kind == "video" }) {
		return nil, errors.New("signaling: more than one video section (one video stream per connection: publish a screen on a connection of its own)")
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
			if !containsAny(a.Value, strippedExtensions) && (m.Kind == "video" || !streamIDs(a.Value)) {
				m.ExtMaps = append(m.ExtMaps, a)
			}
		case "msid":
			m.Msid = a.Value
		}
	}
	var err error
	if m.RIDs, err = simulcastRIDs(md); err != nil {
		return nil, err
	}
	if len(m.RIDs) > 0 {
		if m.ExtensionID(RIDURI) == 0 {
			return nil, errors.New("simulcast without the stream id extension (" + RIDURI + ")")
		}
		m.simulcastSSRC()
	} else {
		m.ExtMaps = slices.DeleteFunc(m.ExtMaps, func(a sdp.Attribute) bool { return streamIDs(a.Value) })
		if err := m.parseSSRCs(md); err != nil {
			return nil, err
		}
	}
	if m.Kind == "video" {
		m.RTXPayloadType, m.PublisherRTX = rtxPayloadType(md, m.PayloadType)
		// (Not an RTX stream nothing names: the offer's SSRC, or each
		// encoding's repaired stream id.)
		if len(m.RIDs) == 0 && m.RTXSSRC == 0 || len(m.RIDs) > 0 && m.ExtensionID(RRIDURI) == 0 {
			m.PublisherRTX = false
		}
		if m.RTXSSRC == 0 {
			m.RTXSSRC = randomSSRC()
		}
	}
	return m, nil
}

// rtxPayloadType is the offer's retransmission payload type for pt (an
// rtx rtpmap whose fmtp's apt is pt: offered), or else one the offer
// leaves free.
func rtxPayloadType(md *sdp.MediaDescription, pt int) (int, bool) {
	rtx := map[string]bool{}
	used := map[int]bool{}
	for _, a := range md.Attributes {
		if a.Key == "rtpmap" {
			n, name, _ := strings.Cut(a.Value, " ")
			if v, err := strconv.Atoi(n); err == nil {
				used[v] = true
			}
			if strings.HasPrefix(strings.ToLower(name), "rtx/") {
				rtx[n] = true
			}
		}
	}
	for _, a := range md.Attributes {
		n, params, _ := strings.Cut(a.Value, " ")
		if a.Key == "fmtp" && rtx[n] && params == "apt="+strconv.Itoa(pt) {
			v, _ := strconv.Atoi(n)
			return v, slices.Contains(md.MediaName.Formats, n)
		}
	}
	for v := 96; v < 128; v++ {
		if !used[v] {
			return v, false
		}
	}
	return 127, false
}

func randomSSRC() uint32 {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return binary.BigEndian.Uint32(b[:]) | 1
}

// parseSSRCs keeps the media SSRCs: those not named second in an
// ssrc-group:FID (retransmission) or FEC-FR group; the FID's second is
// the RTX SSRC.
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
					if f[0] == "FID" {
						m.RTXSSRC = uint32(v)
					}
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

// simulcastRIDs are the encodings a=simulcast:send lists (RFC 8853:
// "send q;h;f"; an old Firefox's "send rid=q;h;f"), each with its
// a=rid:<id> send line; the first of a list of alternatives; paused ones
// ("~h") left out. None without a=simulcast.
func simulcastRIDs(md *sdp.MediaDescription) ([]string, error) {
	v, ok := md.Attribute("simulcast")
	if !ok {
		return nil, nil
	}
	if md.MediaName.Media != "video" {
		return nil, errors.New("simulcast audio")
	}
	f := strings.Fields(v)
	i := slices.Index(f, "send")
	if i < 0 || i+1 >= len(f) {
		return nil, fmt.Errorf("a=simulcast:%s: no send streams", v)
	}
	sent := map[string]bool{}
	for _, a := range md.Attributes {
		if id, dir, _ := strings.Cut(a.Value, " "); a.Key == "rid" {
			if d, _, _ := strings.Cut(dir, " "); d == "send" {
				sent[id] = true
			}
		}
	}
	var rids []string
	for _, alt := range strings.Split(strings.TrimPrefix(f[i+1], "rid="), ";") {
		rid, _, _ := strings.Cut(alt, ",")
		if strings.HasPrefix(rid, "~") {
			continue
		}
		if !validRID(rid) || !sent[rid] || slices.Contains(rids, rid) {
			return nil, fmt.Errorf("a=simulcast:%s: stream %q without its a=rid:%s send line, or not a stream id", v, rid, rid)
		}
		rids = append(rids, rid)
	}
	if len(rids) == 0 || len(rids) > MaxEncodings {
		return nil, fmt.Errorf("a=simulcast:%s: %d encodings (1 to %d)", v, len(rids), MaxEncodings)
	}
	return rids, nil
}

// validRID: RFC 8851's rid-id (letters, digits, '-' and '_'), at most 16
// characters (what fits the extension in one element).
func validRID(rid string) bool {
	if rid == "" || len(rid) > 16 {
		return false
	}
	for _, c := range rid {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// simulcastSSRC gives a simulcast video the SSRC the SFU sends it to
// receivers under (and its cname and msid), whatever SSRCs the offer
// lists: Chromium lists none, Firefox one per encoding.
func (m *Media) simulcastSSRC() {
	ssrc := randomSSRC()
	id := strconv.FormatUint(uint64(ssrc), 10)
	m.SSRCs = []uint32{ssrc}
	m.SSRCLines = []sdp.Attribute{{Key: "ssrc", Value: id + " cname:ebrtc-" + id}}
	if m.Msid != "" {
		m.SSRCLines = append(m.SSRCLines, sdp.Attribute{Key: "ssrc", Value: id + " msid:" + m.Msid})
	}
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
		formats := []string{strconv.Itoa(m.PayloadType)}
		// Receivers are offered the SFU's RTX; the publisher's is answered.
		rtx := m.RTXPayloadType > 0 && (withSSRCs && m.RTXSSRC != 0 || !withSSRCs && m.PublisherRTX)
		if rtx {
			formats = append(formats, strconv.Itoa(m.RTXPayloadType))
		}
		md := &sdp.MediaDescription{
			MediaName: sdp.MediaName{Media: m.Kind, Port: sdp.RangedPort{Value: 9}, Formats: formats},
			ConnectionInformation: &sdp.ConnectionInformation{NetworkType: "IN", AddressType: "IP4",
				Address: &sdp.Address{Address: "0.0.0.0"}},
		}
		withSecurity(md, ice, withSSRCs, p.Security)
		md.WithValueAttribute("rtcp", "9 IN IP4 0.0.0.0")
		md.WithICECredentials(ice.Ufrag, ice.Pwd)
		md.WithValueAttribute("mid", m.Mid)
		for _, a := range m.ExtMaps {
			switch {
			case !withSSRCs: // the answer: what the publisher sends, the SFU receives
				md.Attributes = append(md.Attributes, sdp.Attribute{Key: a.Key, Value: answeredDirection(a.Value)})
			case !streamIDs(a.Value): // a receiver gets one stream
				md.Attributes = append(md.Attributes, a)
			}
		}
		md.WithPropertyAttribute(direction)
		if withSSRCs && m.Msid != "" {
			md.WithValueAttribute("msid", m.Msid)
		}
		md.WithPropertyAttribute("rtcp-mux")
		md.WithPropertyAttribute("rtcp-rsize")
		codec := m.Codec
		if !withSSRCs && m.Kind == "video" && p.StartKbps > 0 {
			codec = withFmtp(codec, m.PayloadType, "x-google-start-bitrate="+strconv.Itoa(p.StartKbps))
		}
		md.Attributes = append(md.Attributes, codec...)
		if m.ExtensionID(TransportCCURI) != 0 {
			// Each leg is a transport of its own: the SFU sends the
			// publisher feedback on what arrived (its uplink), and
			// estimates each receiver's link from the receiver's.
			md.WithValueAttribute("rtcp-fb", strconv.Itoa(m.PayloadType)+" transport-cc")
		}
		if rtx {
			md.WithValueAttribute("rtpmap", fmt.Sprintf("%d rtx/%d", m.RTXPayloadType, m.clockRate()))
			md.WithValueAttribute("fmtp", fmt.Sprintf("%d apt=%d", m.RTXPayloadType, m.PayloadType))
		}
		if !withSSRCs && len(m.RIDs) > 0 {
			for _, rid := range m.RIDs {
				md.WithValueAttribute("rid", rid+" recv")
			}
			md.WithValueAttribute("simulcast", "recv "+strings.Join(m.RIDs, ";"))
		}
		if withSSRCs {
			md.Attributes = append(md.Attributes, m.SSRCLines...)
			if rtx {
				md.WithValueAttribute("ssrc-group", fmt.Sprintf("FID %d %d", m.SSRCs[0], m.RTXSSRC))
				md.Attributes = append(md.Attributes, m.rtxSSRCLines()...)
			}
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

// withFmtp is codec's attributes with param added to payload type pt's
// fmtp (one made if it has none).
func withFmtp(codec []sdp.Attribute, pt int, param string) []sdp.Attribute {
	out := slices.Clone(codec)
	prefix := strconv.Itoa(pt) + " "
	for i, a := range out {
		if a.Key == "fmtp" && strings.HasPrefix(a.Value, prefix) {
			out[i].Value += ";" + param
			return out
		}
	}
	return append(out, sdp.Attribute{Key: "fmtp", Value: prefix + param})
}

// answeredDirection is an offer's extmap value as its answer says it:
// Firefox offers its extensions with a direction ("9/sendonly": it
// sends), which the answerer's side mirrors ("9/recvonly"); one echoed
// as offered says the SFU would send it too, and Firefox then leaves the
// extension out of what it sends (RFC 8285 section 6).
func answeredDirection(v string) string {
	id, rest, _ := strings.Cut(v, " ")
	n, dir, ok := strings.Cut(id, "/")
	if !ok {
		return v
	}
	switch dir {
	case "sendonly":
		dir = "recvonly"
	case "recvonly":
		dir = "sendonly"
	}
	return n + "/" + dir + " " + rest
}

// clockRate is the codec's RTP clock rate (rtpmap's), 90000 if unsaid.
func (m *Media) clockRate() int {
	for _, a := range m.Codec {
		if a.Key != "rtpmap" {
			continue
		}
		_, enc, _ := strings.Cut(a.Value, " ")
		if parts := strings.Split(enc, "/"); len(parts) >= 2 {
			if v, err := strconv.Atoi(parts[1]); err == nil && v > 0 {
				return v
			}
		}
	}
	return 90000
}

// rtxSSRCLines are the media SSRC's a=ssrc attributes (cname, msid) for
// the RTX SSRC.
func (m *Media) rtxSSRCLines() []sdp.Attribute {
	var out []sdp.Attribute
	media := strconv.FormatUint(uint64(m.SSRCs[0]), 10)
	for _, a := range m.SSRCLines {
		if id, rest, _ := strings.Cut(a.Value, " "); id == media {
			out = append(out, sdp.Attribute{Key: "ssrc", Value: strconv.FormatUint(uint64(m.RTXSSRC), 10) + " " + rest})
		}
	}
	return out
}

// ReceiverAnswer is what a receiver's answer accepted of the SFU's offer
// for one publisher's stream.
type ReceiverAnswer struct {
	Ufrag string // its ICE username fragment, which its checks carry
	// TWCC: its video section kept the transport-wide sequence number
	// extension and its feedback: the SFU estimates the receiver's link
	// from it (else from its REMB).
	TWCC bool
	// RTX: its video section kept the retransmission payload type: NACKs
	// are answered on RTX (else on the media SSRC), and probes can pad.
	RTX bool
	// Security: its DTLS-SRTP, if it asked for it.
	Security Security
}

// ParseReceiverAnswer reads a receiver's answer to ReceiverOffer.
func (p *Publish) ParseReceiverAnswer(answer string) (ReceiverAnswer, error) {
	var r ReceiverAnswer
	ufrag, err := RemoteUfrag(answer)
	if err != nil {
		return r, err
	}
	r.Ufrag = ufrag
	var s sdp.SessionDescription
	if err := s.UnmarshalString(answer); err != nil {
		return r, fmt.Errorf("signaling: description: %w", err)
	}
	if r.Security, err = securityOf(&s); err != nil {
		return r, err
	}
	for _, md := range s.MediaDescriptions {
		mid, _ := md.Attribute("mid")
		i := slices.IndexFunc(p.Media, func(m *Media) bool { return m.Mid == mid })
		if i < 0 || p.Media[i].Kind != "video" {
			continue
		}
		m := p.Media[i]
		pt := strconv.Itoa(m.PayloadType)
		fb := slices.ContainsFunc(md.Attributes, func(a sdp.Attribute) bool { return a.Key == "rtcp-fb" && a.Value == pt+" transport-cc" })
		ext := slices.ContainsFunc(md.Attributes, func(a sdp.Attribute) bool { return a.Key == "extmap" && strings.Contains(a.Value, TransportCCURI) })
		r.TWCC = fb && ext && m.ExtensionID(TransportCCURI) != 0
		r.RTX = m.RTXPayloadType > 0 && slices.ContainsFunc(md.Attributes, func(a sdp.Attribute) bool {
			return a.Key == "fmtp" && a.Value == fmt.Sprintf("%d apt=%s", m.RTXPayloadType, pt)
		})
	}
	return r, nil
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
