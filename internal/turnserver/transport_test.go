package turnserver_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// TURN over TCP, TLS and DTLS works, and its channels are never offloaded:
// the fast path speaks plain UDP ChannelData, which would bypass the
// client's chosen transport (and its encryption).
func TestTURNStreamAndSecureTransports(t *testing.T) {
	tb := newTestbed(t)
	cert, key := selfSigned(t)
	r := startRelay(t, tb, "--listen", "udp://10.201.1.1:3478", "--listen", "tcp://10.201.1.1:3478",
		"--listen", "tls://10.201.1.1:5349", "--listen", "dtls://10.201.1.1:5349", "--tls-cert", cert, "--tls-key", key)

	for _, tc := range []struct {
		transport string
		port      uint16
	}{{"tcp", 3478}, {"tls", 5349}, {"dtls", 5349}} {
		t.Run(tc.transport, func(t *testing.T) {
			c := newClientOver(t, tb, testbed.ClientOptions{
				Server: netip.AddrPortFrom(server4.Addr(), tc.port), Transport: tc.transport, Family: turn.RequestedAddressFamilyIPv4,
			})
			peer := newPeer(t, tb, testbed.PeerIP4)
			before := metrics(t, r)
			res, err := testbed.ExchangeAt(c.Relay, peer.LocalAddr(), peer, 300, 200, 2000)
			requireExchange(t, "client to peer", res, err)
			res, err = testbed.ExchangeAt(peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay, 300, 200, 2000)
			requireExchange(t, "peer to client", res, err)
			after := metrics(t, r)
			if after["ebrtc_turn_channels"] < 1 {
				t.Fatalf("pion's client bound no channel over %s", tc.transport)
			}
			if after["ebrtc_xdp_channels"] != 0 {
				t.Fatalf("a %s channel was put in the UDP fast path", tc.transport)
			}
			for _, dir := range []string{"client_to_peer", "peer_to_client"} {
				if f := after.Packets("fast", dir) - before.Packets("fast", dir); f != 0 {
					t.Errorf("%s %s: %v packets on the fast path", tc.transport, dir, f)
				}
			}
		})
	}
}

func selfSigned(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ebrtc.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{server4.Addr().AsSlice()},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}
