package signaling

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/pion/sdp/v3"

	"github.com/ebrtc/ebrtc/internal/sfu/secure"
)

// The profiles of a section: DTLS-SRTP (what browsers send as they ship)
// or plain RTP (a browser started with its encryption off).
const (
	profileSecure = "UDP/TLS/RTP/SAVPF"
	profilePlain  = "RTP/AVPF"
)

// Security is what a browser's description says of its DTLS-SRTP: its
// certificate's fingerprints (RFC 8122) and its setup role (RFC 4145,
// RFC 8842); no fingerprints: plain RTP.
type Security struct {
	Fingerprints []secure.Fingerprint
	Setup        string // "actpass", "active" or "passive"
}

// Encrypted says whether the description asked for DTLS-SRTP.
func (s Security) Encrypted() bool { return len(s.Fingerprints) > 0 }

// securityOf reads the sections' profile and the fingerprints and setup
// (session or section level); every section must agree.
func securityOf(s *sdp.SessionDescription) (Security, error) {
	var sec Security
	first := ""
	for i, md := range s.MediaDescriptions {
		profile := strings.Join(md.MediaName.Protos, "/")
		if profile != profileSecure && profile != profilePlain {
			return sec, fmt.Errorf("signaling: media section %d: profile %s (want %s, or %s for plain RTP)", i, profile, profileSecure, profilePlain)
		}
		if first == "" {
			first = profile
		}
		if profile != first {
			return sec, errors.New("signaling: sections mix encrypted and plain RTP")
		}
		if profile != profileSecure {
			continue
		}
		for _, a := range append(slices.Clone(s.Attributes), md.Attributes...) {
			switch a.Key {
			case "fingerprint":
				f, err := secure.ParseFingerprint(a.Value)
				if err != nil {
					return sec, fmt.Errorf("signaling: media section %d: %w", i, err)
				}
				if !slices.Contains(sec.Fingerprints, f) {
					sec.Fingerprints = append(sec.Fingerprints, f)
				}
			case "setup":
				if sec.Setup != "" && sec.Setup != a.Value {
					return sec, fmt.Errorf("signaling: media section %d: setup %s and %s", i, sec.Setup, a.Value)
				}
				sec.Setup = a.Value
			}
		}
		if !sec.Encrypted() {
			return sec, fmt.Errorf("signaling: media section %d: %s without a=fingerprint", i, profileSecure)
		}
	}
	return sec, nil
}

// Check says whether a browser's description fits the SFU's media: the
// same protection, and a setup role (RFC 8842 5): an offer's actpass,
// active or passive, an answer's active or passive (the SFU offers
// actpass).
func (s Security) Check(encrypted, offer bool) error {
	switch {
	case encrypted && !s.Encrypted():
		return errors.New("signaling: the SFU's media is encrypted (DTLS-SRTP) and this description is plain RTP (a browser with its encryption switched off)")
	case !encrypted && s.Encrypted():
		return errors.New("signaling: the SFU forwards plain RTP (--unencrypted-media) and this description asks for DTLS-SRTP (start the browser with encryption off)")
	case !encrypted:
		return nil
	case offer && s.Setup != "actpass" && s.Setup != "active" && s.Setup != "passive":
		return fmt.Errorf("signaling: offer with setup %q (want actpass, active or passive)", s.Setup)
	case !offer && s.Setup != "active" && s.Setup != "passive":
		return fmt.Errorf("signaling: answer with setup %q to the SFU's actpass (want active or passive)", s.Setup)
	}
	return nil
}

// SFUIsClient: the browser takes the DTLS server's role (setup passive),
// so the SFU starts the handshake. Otherwise the SFU is the server.
func (s Security) SFUIsClient() bool { return s.Setup == "passive" }

// withSecurity puts the SFU's profile, fingerprint and setup role in a
// section it describes: actpass where it offers; where it answers,
// passive (the server), or active to a passive offer.
func withSecurity(md *sdp.MediaDescription, ice ICE, offer bool, peer Security) {
	if ice.Fingerprint.Value == "" {
		md.MediaName.Protos = strings.Split(profilePlain, "/")
		return
	}
	md.MediaName.Protos = strings.Split(profileSecure, "/")
	md.WithValueAttribute("fingerprint", ice.Fingerprint.String())
	setup := "passive"
	switch {
	case offer:
		setup = "actpass"
	case peer.SFUIsClient():
		setup = "active"
	}
	md.WithValueAttribute("setup", setup)
}
