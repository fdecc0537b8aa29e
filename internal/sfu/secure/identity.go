// Package secure is the SFU's end of each PeerConnection's DTLS-SRTP
// (RFC 5763, RFC 5764, RFC 8842): one certificate for the SFU, whose
// fingerprint its descriptions carry, and a Transport per PeerConnection
// that runs the DTLS handshake over the media socket, checks the browser's
// certificate against the fingerprint its description gave, and holds the
// SRTP and SRTCP contexts the data plane decrypts and encrypts with. Keys
// stay inside the Transport: never logged, dropped when it closes.
package secure

import (
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/pion/dtls/v3/pkg/crypto/fingerprint"
	"github.com/pion/dtls/v3/pkg/crypto/selfsign"
)

// Identity is the SFU's DTLS certificate (ECDSA P-256, self-signed, as a
// browser's: what authenticates it is the fingerprint in the signaling).
type Identity struct {
	cert        tls.Certificate
	fingerprint Fingerprint
}

// NewIdentity makes a fresh certificate.
func NewIdentity() (*Identity, error) {
	cert, err := selfsign.GenerateSelfSigned()
	if err != nil {
		return nil, fmt.Errorf("secure: certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("secure: certificate: %w", err)
	}
	fp, err := fingerprint.Fingerprint(leaf, crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("secure: fingerprint: %w", err)
	}
	// RFC 8122 5: upper-case hex, as browsers write it.
	return &Identity{cert: cert, fingerprint: Fingerprint{Algorithm: "sha-256", Value: strings.ToUpper(fp)}}, nil
}

// Fingerprint is the certificate's, for a=fingerprint.
func (id *Identity) Fingerprint() Fingerprint { return id.fingerprint }

// Fingerprint is an a=fingerprint attribute (RFC 8122): a hash function's
// name and the certificate's hash as upper-case hex pairs.
type Fingerprint struct {
	Algorithm string // "sha-256", "sha-384", "sha-512", "sha-1"
	Value     string
}

// String is the attribute's value.
func (f Fingerprint) String() string { return f.Algorithm + " " + f.Value }

// ParseFingerprint reads an a=fingerprint value.
func ParseFingerprint(v string) (Fingerprint, error) {
	alg, val, ok := strings.Cut(strings.TrimSpace(v), " ")
	f := Fingerprint{Algorithm: strings.ToLower(alg), Value: strings.ToUpper(strings.TrimSpace(val))}
	if !ok || f.Value == "" {
		return Fingerprint{}, fmt.Errorf("secure: fingerprint %q: want an algorithm and a value", v)
	}
	h, err := fingerprint.HashFromString(f.Algorithm)
	if err != nil {
		return Fingerprint{}, fmt.Errorf("secure: fingerprint %q: %w", v, err)
	}
	if len(f.Value) != 3*h.Size()-1 {
		return Fingerprint{}, fmt.Errorf("secure: fingerprint %q: %d characters, want %d for %s", v, len(f.Value), 3*h.Size()-1, f.Algorithm)
	}
	return f, nil
}

// matches says whether the certificate is the one f names.
func (f Fingerprint) matches(cert *x509.Certificate) bool {
	h, err := fingerprint.HashFromString(f.Algorithm)
	if err != nil {
		return false
	}
	got, err := fingerprint.Fingerprint(cert, h)
	return err == nil && strings.EqualFold(got, f.Value)
}

var errFingerprint = errors.New("secure: the peer's certificate matches no fingerprint of its description")
