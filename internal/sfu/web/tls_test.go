package web

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Without a certificate given, one is made on first start for the hosts
// (and loopback), its key readable by the owner only, and kept: the next
// start serves the same one, and a new host makes a new one. Given files
// are served; half a pair, or a pair with plain HTTP, is refused naming
// the flags.
func TestTLSCertificates(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	first, err := TLS{Dir: dir, Hosts: []string{"10.0.0.1", "meet.example"}}.Load()
	if err != nil {
		t.Fatal(err)
	}
	if !first.Made || first.Config == nil || len(first.Fingerprint) != 95 {
		t.Fatalf("first start: %+v", first)
	}
	leaf := first.Config.Certificates[0].Leaf
	for _, h := range []string{"10.0.0.1", "meet.example", "localhost", "127.0.0.1", "::1"} {
		if err := leaf.VerifyHostname(h); err != nil {
			t.Errorf("the certificate does not name %s: %v", h, err)
		}
	}
	if st, err := os.Stat(filepath.Join(dir, selfSignedKey)); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v", st.Mode(), err)
	}
	again, err := TLS{Dir: dir, Hosts: []string{"10.0.0.1"}}.Load()
	if err != nil || again.Made || again.Fingerprint != first.Fingerprint {
		t.Errorf("second start: made %v, same %v, %v", again.Made, again.Fingerprint == first.Fingerprint, err)
	}
	moved, err := TLS{Dir: dir, Hosts: []string{"10.0.0.2"}}.Load()
	if err != nil || !moved.Made || moved.Fingerprint == first.Fingerprint {
		t.Errorf("a new address: made %v, %v", moved.Made, err)
	}
	given, err := TLS{CertFile: filepath.Join(dir, selfSignedCert), KeyFile: filepath.Join(dir, selfSignedKey)}.Load()
	if err != nil || given.Made || given.Fingerprint != moved.Fingerprint {
		t.Errorf("files given: %+v, %v", given, err)
	}
	if _, err := x509.ParseCertificate(given.Config.Certificates[0].Certificate[0]); err != nil {
		t.Error(err)
	}
	for _, c := range []struct {
		tls  TLS
		want string
	}{
		{TLS{CertFile: "a.crt"}, "tls-key"},
		{TLS{CertFile: "a.crt", KeyFile: "a.key", Plain: true}, "--http"},
		{TLS{}, "state-dir"},
		{TLS{CertFile: "/nonexistent.crt", KeyFile: "/nonexistent.key"}, "certificate"},
	} {
		if _, err := c.tls.Load(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %q", c.tls, err, c.want)
		}
	}
	if plain, err := (TLS{Plain: true}).Load(); err != nil || plain.Config != nil {
		t.Errorf("plain: %+v %v", plain, err)
	}
}
