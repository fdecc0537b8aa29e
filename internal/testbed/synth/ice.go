package synth

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/pion/sdp/v3"
	"github.com/pion/stun/v4"

	"github.com/ebrtc/ebrtc/internal/sfu/secure"
)

// localICE is a participant's own ICE credentials (RFC 8445 5.3: a ufrag
// of at least 4 characters, a password of at least 22) and, where the SFU
// wants one, the host candidate of the connection's socket.
type localICE struct {
	Ufrag, Pwd string
	Candidate  netip.AddrPort
}

// describe adds our credentials and candidate (then end-of-candidates: no
// trickling) to a media description.
func (l localICE) describe(md *sdp.MediaDescription) {
	md.WithValueAttribute("ice-ufrag", l.Ufrag).WithValueAttribute("ice-pwd", l.Pwd)
	if l.Candidate.IsValid() {
		md.WithValueAttribute("candidate", fmt.Sprintf("1 1 udp 2130706431 %s %d typ host", l.Candidate.Addr(), l.Candidate.Port())).
			WithPropertyAttribute("end-of-candidates")
	}
}

func newLocalICE() localICE {
	return localICE{Ufrag: rand.Text()[:8], Pwd: rand.Text()}
}

// bindingRequest is a connectivity check from us (controlling, nominating:
// the SFU is ICE-lite) to the SFU, signed with the SFU's password.
func bindingRequest(local localICE, remote remoteICE) ([]byte, error) {
	m, err := stun.Build(stun.TransactionID, stun.BindingRequest,
		stun.NewUsername(remote.Ufrag+":"+local.Ufrag),
		stun.RawAttribute{Type: stun.AttrUseCandidate},
		stun.RawAttribute{Type: stun.AttrICEControlling, Value: make([]byte, 8)},
		stun.RawAttribute{Type: stun.AttrPriority, Value: []byte{0x6e, 0, 0x1e, 0xff}},
		stun.NewShortTermIntegrity(remote.Pwd), stun.Fingerprint)
	if err != nil {
		return nil, err
	}
	return m.Raw, nil
}

// answerCheck answers b if it is a connectivity check to us (signed with
// our password) and says whether b was STUN. ebrtc sfu never checks; Janus's
// libnice does, even as ICE-lite, and fails the pair without an answer.
func answerCheck(conn *net.UDPConn, local localICE, b []byte, from netip.AddrPort) bool {
	if !stun.IsMessage(b) {
		return false
	}
	req := &stun.Message{Raw: append([]byte(nil), b...)}
	if req.Decode() != nil || req.Type != stun.BindingRequest || stun.NewShortTermIntegrity(local.Pwd).Check(req) != nil {
		return true
	}
	resp, err := stun.Build(req, stun.BindingSuccess,
		&stun.XORMappedAddress{IP: from.Addr().AsSlice(), Port: int(from.Port())},
		stun.NewShortTermIntegrity(local.Pwd), stun.Fingerprint)
	if err == nil {
		_, _ = conn.WriteToUDPAddrPort(resp.Raw, from)
	}
	return true
}

// connect runs connectivity checks from conn until one succeeds (every
// 100 ms, for 5 s): then the SFU has bound this address. A refusal is
// retried too: the check may overtake our answer on its way through
// signaling, as a browser's may.
func connect(conn *net.UDPConn, local localICE, remote *remoteICE) error {
	// A check to each candidate (Janus has one per interface; the one on
	// our path answers), told apart by transaction id.
	reqs := map[[stun.TransactionIDSize]byte]netip.AddrPort{}
	raw := map[netip.AddrPort][]byte{}
	for _, to := range remote.Candidates {
		req, err := bindingRequest(local, *remote)
		if err != nil {
			return err
		}
		m := &stun.Message{Raw: req}
		if err := m.Decode(); err != nil {
			return err
		}
		reqs[m.TransactionID], raw[to] = to, req
	}
	refused := errors.New("synth: no answer to connectivity checks within 5 s")
	buf := make([]byte, 1500)
	defer conn.SetReadDeadline(time.Time{})
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		for to, req := range raw {
			if _, err := conn.WriteToUDPAddrPort(req, to); err != nil {
				return fmt.Errorf("synth: check: %w", err)
			}
		}
		_ = conn.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		for {
			n, from, err := conn.ReadFromUDPAddrPort(buf)
			if err != nil {
				break
			}
			m := &stun.Message{Raw: buf[:n]}
			if !stun.IsMessage(buf[:n]) || m.Decode() != nil {
				continue // media, already
			}
			if m.Type == stun.BindingRequest {
				answerCheck(conn, local, buf[:n], from)
				continue
			}
			to, ours := reqs[m.TransactionID]
			if ours && m.Type == stun.BindingSuccess && stun.NewShortTermIntegrity(remote.Pwd).Check(m) == nil {
				remote.Candidate = to
				return nil
			}
			if ours && m.Type.Class == stun.ClassErrorResponse {
				var code stun.ErrorCodeAttribute
				_ = code.GetFrom(m)
				refused = fmt.Errorf("synth: the SFU refused every check for 5 s: %v", code)
			}
		}
	}
	return refused
}

// consentEvery is how often a participant refreshes consent (RFC 7675 asks
// for 4-6 s; the SFU expires after 30 s).
const consentEvery = 5 * time.Second

// offer is ChromiumOffer made a virtual sender's: its ICE credentials and
// SSRCs, no retransmission SSRCs; plain, without NACKs and transport-wide
// numbers (Config.Plain); with id, DTLS-SRTP (Config.Encrypted).
func offer(local localICE, s *Stream, plain bool, id *secure.Identity) (string, error) {
	var sd sdp.SessionDescription
	if err := sd.UnmarshalString(ChromiumOffer); err != nil {
		return "", err
	}
	for _, md := range sd.MediaDescriptions {
		ssrc := s.AudioSSRC
		if md.MediaName.Media == "video" {
			ssrc = s.VideoSSRC
		}
		var attrs []sdp.Attribute
		for _, a := range md.Attributes {
			switch a.Key {
			case "ice-ufrag", "ice-pwd", "ssrc", "ssrc-group", "candidate", "end-of-candidates":
				continue
			}
			if plain && feedbackAttribute(a) {
				continue
			}
			attrs = append(attrs, a)
		}
		md.Attributes = attrs
		local.describe(md)
		if id != nil {
			describeSecurity(md, id, true, "")
		}
		md.WithValueAttribute("ssrc", fmt.Sprintf("%d cname:synth", ssrc))
	}
	b, err := sd.Marshal()
	return string(b), err
}

// feedbackAttribute: NACKs and transport-wide congestion control (feedback
// and the header extension).
func feedbackAttribute(a sdp.Attribute) bool {
	switch a.Key {
	case "rtcp-fb":
		_, fb, _ := strings.Cut(a.Value, " ")
		return fb == "nack" || fb == "transport-cc"
	case "extmap":
		return strings.Contains(a.Value, transportCCURI)
	}
	return false
}

const transportCCURI = "http://www.ietf.org/id/draft-holmer-rmcat-transport-wide-cc-extensions-01"

// answer accepts the SFU's receive offer: every section received, with
// our ICE credentials; with twcc, transport-cc feedback (Config.TWCC);
// with id, DTLS-SRTP.
func answer(local localICE, offerSDP string, twcc bool, id *secure.Identity) (string, error) {
	var o sdp.SessionDescription
	if err := o.UnmarshalString(offerSDP); err != nil {
		return "", fmt.Errorf("synth: the SFU's offer: %w", err)
	}
	a := &sdp.SessionDescription{
		Origin:      sdp.Origin{Username: "-", SessionID: 1, SessionVersion: 2, NetworkType: "IN", AddressType: "IP4", UnicastAddress: "127.0.0.1"},
		SessionName: "-", TimeDescriptions: []sdp.TimeDescription{{}},
	}
	var mids []string
	for _, om := range o.MediaDescriptions {
		md := &sdp.MediaDescription{MediaName: sdp.MediaName{Media: om.MediaName.Media, Port: sdp.RangedPort{Value: 9},
			Protos: om.MediaName.Protos, Formats: om.MediaName.Formats},
			ConnectionInformation: &sdp.ConnectionInformation{NetworkType: "IN", AddressType: "IP4", Address: &sdp.Address{Address: "0.0.0.0"}}}
		mid, _ := om.Attribute("mid")
		mids = append(mids, mid)
		local.describe(md)
		if id != nil {
			setup, _ := om.Attribute("setup")
			if setup == "" {
				setup, _ = o.Attribute("setup")
			}
			describeSecurity(md, id, false, setup)
		}
		md.WithValueAttribute("mid", mid).WithPropertyAttribute("recvonly").WithPropertyAttribute("rtcp-mux")
		for _, at := range om.Attributes {
			if at.Key == "rtpmap" || at.Key == "fmtp" || at.Key == "extmap" ||
				(twcc && at.Key == "rtcp-fb" && strings.HasSuffix(at.Value, " transport-cc")) {
				md.Attributes = append(md.Attributes, at)
			}
		}
		a.WithMedia(md)
	}
	a.WithValueAttribute("group", "BUNDLE "+strings.Join(mids, " "))
	b, err := a.Marshal()
	return string(b), err
}
