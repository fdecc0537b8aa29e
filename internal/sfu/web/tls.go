package web

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// TLS is how the web server serves the page and its WebSocket: HTTPS and
// WSS with the operator's certificate (CertFile, KeyFile), or with one it
// makes on first start and keeps in Dir (self-signed: for trying it out,
// a browser asks once to trust it), or plain HTTP (Plain: behind a proxy
// that terminates TLS). A browser on another host gets its camera only in
// a secure context, so HTTPS is the default.
type TLS struct {
	CertFile, KeyFile string
	// Dir keeps the self-signed certificate (selfSignedCert, selfSignedKey).
	Dir string
	// Hosts are the names and addresses a self-signed certificate is made
	// for (with localhost, 127.0.0.1 and ::1).
	Hosts []string
	Plain bool
}

// The self-signed certificate's files in TLS.Dir.
const (
	selfSignedCert = "sfu-web.crt"
	selfSignedKey  = "sfu-web.key"
)

// Certificate is what the server serves with.
type Certificate struct {
	Config *tls.Config // nil: plain HTTP
	// Fingerprint is the SHA-256 of the certificate (colon hex), for an
	// operator to check what a browser shows.
	Fingerprint string
	// Made: the self-signed certificate was made now (at File).
	Made bool
	File string
}

// Load reads, or makes, the certificate t asks for.
func (t TLS) Load() (Certificate, error) {
	switch {
	case t.Plain && (t.CertFile != "" || t.KeyFile != ""):
		return Certificate{}, errors.New("web: tls-cert/tls-key with plain HTTP (--http): choose one")
	case t.Plain:
		return Certificate{}, nil
	case (t.CertFile == "") != (t.KeyFile == ""):
		return Certificate{}, errors.New("web: tls-cert and tls-key go together")
	case t.CertFile != "":
		return load(t.CertFile, t.KeyFile, false)
	case t.Dir == "":
		return Certificate{}, errors.New("web: state-dir: needed for the self-signed certificate (or give tls-cert and tls-key, or --http)")
	}
	cert, key := filepath.Join(t.Dir, selfSignedCert), filepath.Join(t.Dir, selfSignedKey)
	// Kept while valid for a day more and naming the hosts; remade
	// otherwise, also when the pair does not load (a crash between its
	// two files).
	if c, err := load(cert, key, false); err == nil {
		if leaf := c.Config.Certificates[0].Leaf; leaf != nil && time.Now().Before(leaf.NotAfter.Add(-24*time.Hour)) && covers(leaf, t.Hosts) {
			return c, nil
		}
	}
	if err := makeSelfSigned(cert, key, t.Hosts); err != nil {
		return Certificate{}, err
	}
	return load(cert, key, true)
}

func load(certFile, keyFile string, made bool) (Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return Certificate{}, fmt.Errorf("web: certificate: %w", err)
	}
	sum := sha256.Sum256(pair.Certificate[0])
	hex := make([]string, len(sum))
	for i, b := range sum {
		hex[i] = fmt.Sprintf("%02X", b)
	}
	return Certificate{Config: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		Fingerprint: strings.Join(hex, ":"), Made: made, File: certFile}, nil
}

// covers says whether the certificate names every host.
func covers(c *x509.Certificate, hosts []string) bool {
	for _, h := range hosts {
		if c.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// makeSelfSigned writes a year's self-signed ECDSA P-256 certificate for
// hosts (and loopback), its key readable by the owner only.
func makeSelfSigned(certFile, keyFile string, hosts []string) error {
	if err := os.MkdirAll(filepath.Dir(certFile), 0o700); err != nil {
		return fmt.Errorf("web: state-dir: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: "ebrtc sfu (self-signed)"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := writeAtomically(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return err
	}
	return writeAtomically(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
}

// writeAtomically replaces file with b (mode perm) by a rename, so a
// crash leaves the old file or the new one, never half of one; a key
// left from a crash between the two files is a pair that does not load,
// which Load replaces.
func writeAtomically(file string, b []byte, perm os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(file), filepath.Base(file)+".*")
	if err != nil {
		return fmt.Errorf("web: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(perm); err == nil {
		_, err = tmp.Write(b)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), file)
	}
	if err != nil {
		return fmt.Errorf("web: %w", err)
	}
	return nil
}
