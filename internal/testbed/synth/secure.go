package synth

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/pion/sdp/v3"

	"github.com/ebrtc/ebrtc/internal/sfu/secure"
)

// A participant with Config.Encrypted speaks DTLS-SRTP as a browser does
// as it ships: its own certificate, the SRTP profiles browsers offer, and
// the setup role RFC 8842 gives it (actpass offering; answering, active;
// the DTLS server only where the other side chose active, as Janus
// answering an offer does). It seals what it sends and opens what it
// receives, so what the bench's receivers count and compare is the media.

// handshakeWithin bounds a connection's DTLS handshake.
const handshakeWithin = 10 * time.Second

// describeSecurity puts our profile, fingerprint and setup role in a
// section we describe: actpass offering; answering, active, or passive
// to an offer that is active itself (the remote's setup).
func describeSecurity(md *sdp.MediaDescription, id *secure.Identity, offer bool, remoteSetup string) {
	md.MediaName.Protos = []string{"UDP", "TLS", "RTP", "SAVPF"}
	md.WithValueAttribute("fingerprint", id.Fingerprint().String())
	setup := "active"
	switch {
	case offer:
		setup = "actpass"
	case remoteSetup == "active":
		setup = "passive"
	}
	md.WithValueAttribute("setup", setup)
}

// secureConnection gives c a DTLS-SRTP transport to the other side that
// desc describes (its fingerprint and setup role). It does not start:
// the connection's reader hands it DTLS (handleDTLS), then handshake.
func (p *Participant) secureConnection(c *connection, desc string) error {
	sec, err := securityOf(desc)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	tr, err := p.identity.NewTransport(secure.TransportConfig{
		Fingerprints: sec.fingerprints,
		Send: func(b []byte, to netip.AddrPort) error {
			_, err := c.conn.WriteToUDPAddrPort(b, to)
			return err
		},
		Done:             func(err error) { done <- err },
		HandshakeTimeout: handshakeWithin,
		Client:           sec.setup != "active", // we answered active, or the other side is passive
	})
	if err != nil {
		return err
	}
	c.tr, c.handshake = tr, done
	return nil
}

// remoteSecurity is what the other side's description says of its
// DTLS: its certificate's fingerprints and its setup role.
type remoteSecurity struct {
	fingerprints []secure.Fingerprint
	setup        string
}

// securityOf reads a description's fingerprints and setup role (session
// or section level). (The SFU's reading, internal/sfu/signaling, holds
// browsers to more.)
func securityOf(desc string) (remoteSecurity, error) {
	var sd sdp.SessionDescription
	var sec remoteSecurity
	if err := sd.UnmarshalString(desc); err != nil {
		return sec, fmt.Errorf("synth: the SFU's description: %w", err)
	}
	attrs := sd.Attributes
	for _, md := range sd.MediaDescriptions {
		attrs = append(attrs, md.Attributes...)
	}
	for _, a := range attrs {
		switch a.Key {
		case "fingerprint":
			f, err := secure.ParseFingerprint(a.Value)
			if err != nil {
				return sec, fmt.Errorf("synth: the SFU's description: %w", err)
			}
			if !slices.Contains(sec.fingerprints, f) { // (every section names it)
				sec.fingerprints = append(sec.fingerprints, f)
			}
		case "setup":
			sec.setup = a.Value
		}
	}
	if len(sec.fingerprints) == 0 {
		return sec, errors.New("synth: the SFU's description is plain RTP (no fingerprint) and this participant encrypts")
	}
	return sec, nil
}

// handshakeDone runs c's DTLS handshake to its end (a plain connection has
// none): as the client it starts it, as the server the other side does.
func (c *connection) handshakeDone() error {
	if c.tr == nil {
		return nil
	}
	c.tr.Connect(c.remote.Candidate)
	select {
	case err := <-c.handshake:
		if err != nil {
			return fmt.Errorf("synth: DTLS: %w", err)
		}
		return nil
	case <-time.After(handshakeWithin + time.Second):
		return errors.New("synth: DTLS handshake unfinished")
	}
}

// handleDTLS hands b to c's transport if it is a DTLS record (RFC 7983:
// first byte 20-63) and says whether it was.
func (c *connection) handleDTLS(b []byte, from netip.AddrPort) bool {
	if c.tr == nil || len(b) == 0 || b[0] < 20 || b[0] > 63 {
		return false
	}
	c.tr.Handle(b, from) // (it keeps a copy)
	return true
}

// seal is b as it goes on c's wire: sealed into dst's storage, or b
// itself on a plain connection.
func (c *connection) seal(dst, b []byte) ([]byte, error) {
	if c.tr == nil {
		return b, nil
	}
	return c.tr.Seal(dst, b)
}

// open is what arrived on c as media: opened into dst's storage, or b
// itself on a plain connection.
func (c *connection) open(dst, b []byte) ([]byte, error) {
	if c.tr == nil {
		return b, nil
	}
	return c.tr.Open(dst, b)
}
