package secure

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/pion/dtls/v3"
	"github.com/pion/dtls/v3/pkg/crypto/fingerprint"
	"github.com/pion/dtls/v3/pkg/crypto/selfsign"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
)

var (
	browserAddr = netip.MustParseAddrPort("192.0.2.10:50000")
	sfuAddr     = netip.MustParseAddrPort("192.0.2.1:40000")
)

// browser is the far end: a pion/dtls client, as a browser is (the
// answerer to the SFU's actpass, or the offerer to its passive).
type browser struct {
	cert     tls.Certificate
	fp       Fingerprint
	pipe     *pipe
	in, out  *srtp.Context
	profiles []dtls.SRTPProtectionProfile
}

func newBrowser(t testing.TB, profiles ...dtls.SRTPProtectionProfile) *browser {
	t.Helper()
	cert, err := selfsign.GenerateSelfSigned()
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	v, err := fingerprint.Fingerprint(leaf, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{cert: cert, fp: Fingerprint{"sha-256", v}, profiles: profiles}
}

// connect runs the handshake between b and a new transport of id's that
// expects fps, and returns the transport and how its handshake ended.
func connect(t testing.TB, id *Identity, b *browser, fps ...Fingerprint) (*Transport, error, error) {
	t.Helper()
	return connectAs(t, id, b, false, fps...)
}

// connectAs is connect with the SFU as the DTLS client if sfuClient (the
// browser answered passive).
func connectAs(t testing.TB, id *Identity, b *browser, sfuClient bool, fps ...Fingerprint) (*Transport, error, error) {
	t.Helper()
	done := make(chan error, 1)
	var tr *Transport
	b.pipe = newPipe(func(p []byte, _ netip.AddrPort) error { tr.Handle(p, browserAddr); return nil })
	tr, err := id.NewTransport(TransportConfig{Fingerprints: fps, HandshakeTimeout: 5 * time.Second, Client: sfuClient,
		Send: func(p []byte, to netip.AddrPort) error {
			if to != browserAddr {
				t.Errorf("DTLS sent to %v, want %v", to, browserAddr)
			}
			b.pipe.deliver(p, sfuAddr)
			return nil
		},
		Done: func(err error) { done <- err }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.Close)
	b.pipe.remote = sfuAddr
	sfuFP := id.Fingerprint()
	opts := []dtls.Option{
		dtls.WithCertificates(b.cert),
		dtls.WithSRTPProtectionProfiles(b.profiles...),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret),
		dtls.WithInsecureSkipVerify(true),
		dtls.WithVerifyPeerCertificate(func(raw [][]byte, _ [][]*x509.Certificate) error {
			cert, err := x509.ParseCertificate(raw[0])
			if err != nil || !sfuFP.matches(cert) {
				return errors.New("the SFU's certificate is not the one its description names")
			}
			return nil
		})}
	var conn *dtls.Conn
	if sfuClient {
		sopts := []dtls.ServerOption{dtls.WithClientAuth(dtls.RequireAnyClientCert)}
		for _, o := range opts {
			sopts = append(sopts, o)
		}
		conn, err = dtls.ServerWithOptions(b.pipe, b.pipe.remoteAddr(), sopts...)
		tr.Handle([]byte{22}, netip.AddrPort{}) // a client does not start on a record (this one is dropped)
		tr.Connect(browserAddr)
	} else {
		copts := []dtls.ClientOption{}
		for _, o := range opts {
			copts = append(copts, o)
		}
		conn, err = dtls.ClientWithOptions(b.pipe, b.pipe.remoteAddr(), copts...)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	herr := conn.Handshake()
	var serr error
	select {
	case serr = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the transport's handshake did not end")
	}
	if herr == nil && serr == nil {
		dp, _ := conn.SelectedSRTPProtectionProfile()
		profile := map[dtls.SRTPProtectionProfile]srtp.ProtectionProfile{
			dtls.SRTP_AEAD_AES_128_GCM: srtp.ProtectionProfileAeadAes128Gcm, dtls.SRTP_AES128_CM_HMAC_SHA1_80: srtp.ProtectionProfileAes128CmHmacSha1_80}[dp]
		state, _ := conn.ConnectionState()
		cfg := srtp.Config{Profile: profile}
		if err := cfg.ExtractSessionKeysFromDTLS(&state, !sfuClient); err != nil {
			t.Fatal(err)
		}
		if b.out, err = srtp.CreateContext(cfg.Keys.LocalMasterKey, cfg.Keys.LocalMasterSalt, profile); err != nil {
			t.Fatal(err)
		}
		if b.in, err = srtp.CreateContext(cfg.Keys.RemoteMasterKey, cfg.Keys.RemoteMasterSalt, profile, srtp.SRTPReplayProtection(64)); err != nil {
			t.Fatal(err)
		}
	}
	return tr, herr, serr
}

func rtpPacket(t testing.TB, seq uint16, payload int) []byte {
	t.Helper()
	p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 96, SequenceNumber: seq, Timestamp: 3000 * uint32(seq), SSRC: 0x1234}, Payload: make([]byte, payload)}
	_, _ = rand.Read(p.Payload)
	b, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The handshake with a browser whose certificate the description names
// gives both ends the same keys: what the browser encrypts the SFU opens
// to the same bytes, and the reverse, for SRTP and SRTCP; AES-GCM where
// offered, AES-CM with HMAC-SHA1-80 where it is all.
func TestTransportHandshakeAndKeys(t *testing.T) {
	id, err := NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		offered   []dtls.SRTPProtectionProfile
		want      dtls.SRTPProtectionProfile
		overhead  int
		sfuClient bool
	}{
		{"GCM preferred", []dtls.SRTPProtectionProfile{dtls.SRTP_AES128_CM_HMAC_SHA1_80, dtls.SRTP_AEAD_AES_128_GCM}, dtls.SRTP_AEAD_AES_128_GCM, 16, false},
		{"CM accepted", []dtls.SRTPProtectionProfile{dtls.SRTP_AES128_CM_HMAC_SHA1_80}, dtls.SRTP_AES128_CM_HMAC_SHA1_80, 10, false},
		{"the SFU as client", []dtls.SRTPProtectionProfile{dtls.SRTP_AEAD_AES_128_GCM, dtls.SRTP_AES128_CM_HMAC_SHA1_80}, dtls.SRTP_AEAD_AES_128_GCM, 16, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newBrowser(t, c.offered...)
			tr, herr, serr := connectAs(t, id, b, c.sfuClient, b.fp)
			if herr != nil || serr != nil {
				t.Fatalf("handshake: browser %v, SFU %v", herr, serr)
			}
			if got, _ := tr.Profile(); got != c.want || !tr.Ready() || tr.Overhead() != c.overhead {
				t.Fatalf("profile %v ready %v overhead %d, want %v and %d", got, tr.Ready(), tr.Overhead(), c.want, c.overhead)
			}
			for seq := uint16(1); seq < 50; seq++ {
				plain := rtpPacket(t, seq, 1100)
				enc, err := b.out.EncryptRTP(nil, plain, nil)
				if err != nil {
					t.Fatal(err)
				}
				if len(enc) != len(plain)+c.overhead || bytes.Equal(enc[12:], plain[12:]) {
					t.Fatalf("browser's SRTP: %d bytes for %d", len(enc), len(plain))
				}
				got, err := tr.Open(make([]byte, 0, 1500), enc)
				if err != nil || !bytes.Equal(got, plain) {
					t.Fatalf("Open: %v, equal %v", err, bytes.Equal(got, plain))
				}
				sealed, err := tr.Seal(make([]byte, 0, 1500), plain)
				if err != nil {
					t.Fatal(err)
				}
				back, err := b.in.DecryptRTP(nil, sealed, nil)
				if err != nil || !bytes.Equal(back, plain) {
					t.Fatalf("the browser opens the SFU's SRTP: %v", err)
				}
			}
			pli, _ := (&rtcp.PictureLossIndication{SenderSSRC: 1, MediaSSRC: 0x1234}).Marshal()
			enc, err := b.out.EncryptRTCP(nil, pli, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got, err := tr.Open(nil, enc); err != nil || !bytes.Equal(got, pli) {
				t.Fatalf("Open SRTCP: %v", err)
			}
			sealed, err := tr.Seal(nil, pli)
			if err != nil {
				t.Fatal(err)
			}
			if back, err := b.in.DecryptRTCP(nil, sealed, nil); err != nil || !bytes.Equal(back, pli) {
				t.Fatalf("the browser opens the SFU's SRTCP: %v", err)
			}
		})
	}
}

// What an attacker on the path can send is refused: a replayed packet, a
// flipped bit anywhere (header, payload, tag), a truncated one, one
// sealed with other keys, RTCP replayed; a good packet still opens after.
func TestTransportRefusesForgeries(t *testing.T) {
	id, _ := NewIdentity()
	b := newBrowser(t, dtls.SRTP_AEAD_AES_128_GCM)
	tr, herr, serr := connect(t, id, b, b.fp)
	if herr != nil || serr != nil {
		t.Fatalf("handshake: %v %v", herr, serr)
	}
	enc, _ := b.out.EncryptRTP(nil, rtpPacket(t, 7, 300), nil)
	if _, err := tr.Open(nil, enc); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Open(nil, enc); err == nil {
		t.Error("a replayed packet opened")
	}
	fresh, _ := b.out.EncryptRTP(nil, rtpPacket(t, 8, 300), nil)
	for _, i := range []int{1, 5, 12, 100, len(fresh) - 1} {
		forged := append([]byte(nil), fresh...)
		forged[i] ^= 0x40
		if _, err := tr.Open(nil, forged); err == nil {
			t.Errorf("a packet with byte %d flipped opened", i)
		}
	}
	for _, n := range []int{0, 1, 11, 12, 20, len(fresh) - 1} {
		if _, err := tr.Open(nil, fresh[:n]); err == nil {
			t.Errorf("a packet cut to %d bytes opened", n)
		}
	}
	other := newBrowser(t, dtls.SRTP_AEAD_AES_128_GCM)
	id2, _ := NewIdentity()
	if _, h, s := connect(t, id2, other, other.fp); h != nil || s != nil {
		t.Fatal(h, s)
	}
	if enc, _ := other.out.EncryptRTP(nil, rtpPacket(t, 9, 300), nil); enc != nil {
		if _, err := tr.Open(nil, enc); err == nil {
			t.Error("a packet under another connection's keys opened")
		}
	}
	if _, err := tr.Open(nil, fresh); err != nil {
		t.Errorf("the good packet after the forgeries: %v", err)
	}
	rr, _ := (&rtcp.ReceiverReport{SSRC: 5}).Marshal()
	encRR, _ := b.out.EncryptRTCP(nil, rr, nil)
	if _, err := tr.Open(nil, encRR); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Open(nil, encRR); err == nil {
		t.Error("a replayed SRTCP packet opened")
	}
}

// A browser whose certificate is not the one its description named gets
// no keys; nor does a transport closed before or after its handshake.
func TestTransportRefusesTheWrongCertificate(t *testing.T) {
	id, _ := NewIdentity()
	b, impostor := newBrowser(t, Profiles()...), newBrowser(t, Profiles()...)
	tr, herr, serr := connect(t, id, b, impostor.fp)
	if serr == nil || !errors.Is(serr, errFingerprint) && !bytes.Contains([]byte(serr.Error()), []byte("fingerprint")) {
		t.Errorf("SFU's handshake: %v, want the fingerprint refused", serr)
	}
	if herr == nil {
		t.Error("the browser's handshake succeeded")
	}
	if tr.Ready() {
		t.Fatal("keys for the wrong certificate")
	}
	if _, err := tr.Seal(nil, rtpPacket(t, 1, 10)); !errors.Is(err, ErrNotReady) {
		t.Errorf("Seal without keys: %v", err)
	}
	good, h, s := connect(t, id, b, b.fp)
	if h != nil || s != nil {
		t.Fatal(h, s)
	}
	good.Close()
	if _, err := good.Seal(nil, rtpPacket(t, 1, 10)); !errors.Is(err, ErrNotReady) {
		t.Errorf("Seal after Close: %v", err)
	}
}

// A peer that starts a handshake and never finishes it, or sends
// garbage, ends with an error by the timeout; nothing panics, nothing is
// ready, and Close returns.
func TestTransportHandshakeTimesOut(t *testing.T) {
	id, _ := NewIdentity()
	for name, first := range map[string][]byte{
		"garbage":    append([]byte{22, 0xfe, 0xfd}, bytes.Repeat([]byte{0xff}, 40)...),
		"truncated":  {22, 0xfe},
		"alert only": {21, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 40},
	} {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			tr, err := id.NewTransport(TransportConfig{Fingerprints: []Fingerprint{id.Fingerprint()}, HandshakeTimeout: 300 * time.Millisecond,
				Send: func([]byte, netip.AddrPort) error { return nil }, Done: func(err error) { done <- err }})
			if err != nil {
				t.Fatal(err)
			}
			for range 200 { // more than the queue holds
				tr.Handle(first, browserAddr)
			}
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("handshake succeeded")
				}
			case <-time.After(5 * time.Second):
				t.Fatal("no end to the handshake")
			}
			if tr.Ready() {
				t.Error("ready")
			}
			tr.Close()
		})
	}
}

func TestParseFingerprint(t *testing.T) {
	id, _ := NewIdentity()
	f, err := ParseFingerprint(id.Fingerprint().String())
	if err != nil || f != id.Fingerprint() {
		t.Fatalf("round trip: %v %v", f, err)
	}
	lower, err := ParseFingerprint("SHA-256 " + string(bytes.ToLower([]byte(id.Fingerprint().Value))))
	if err != nil || lower != id.Fingerprint() {
		t.Errorf("case: %v %v", lower, err)
	}
	for _, bad := range []string{"", "sha-256", "md5 AB:CD", "sha-256 AB:CD", "sha-999 " + id.Fingerprint().Value} {
		if _, err := ParseFingerprint(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// BenchmarkOpenSeal is the encrypted data path's crypto for one 1,100-byte
// packet with two header extensions (as Chromium's video: transport-wide
// number, dependency descriptor): opened once, sealed for one receiver.
func BenchmarkOpenSeal(b *testing.B) {
	id, _ := NewIdentity()
	for name, profile := range map[string]dtls.SRTPProtectionProfile{"AES-GCM": dtls.SRTP_AEAD_AES_128_GCM, "AES-CM-HMAC-SHA1-80": dtls.SRTP_AES128_CM_HMAC_SHA1_80} {
		b.Run(name, func(b *testing.B) {
			br := newBrowser(b, profile)
			tr, herr, serr := connect(b, id, br, br.fp)
			if herr != nil || serr != nil {
				b.Fatal(herr, serr)
			}
			defer tr.Close()
			p := &rtp.Packet{Header: rtp.Header{Version: 2, PayloadType: 45, SSRC: 0x1234, Timestamp: 1}, Payload: make([]byte, 1100)}
			_ = p.Header.SetExtension(3, []byte{0, 1})
			_ = p.Header.SetExtension(8, make([]byte, 7))
			open, seal := make([]byte, 0, 1600), make([]byte, 0, 1600)
			encs := make([][]byte, 4096)
			for i := range encs {
				p.SequenceNumber = uint16(i)
				plain, _ := p.Marshal()
				encs[i], _ = br.out.EncryptRTP(nil, plain, nil)
			}
			b.SetBytes(1100)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%len(encs) == 0 && i > 0 { // fresh numbers past the replay window
					b.StopTimer()
					for k := range encs {
						p.SequenceNumber = uint16(i + k)
						plain, _ := p.Marshal()
						encs[k], _ = br.out.EncryptRTP(encs[k][:0], plain, nil)
					}
					b.StartTimer()
				}
				plain, err := tr.Open(open[:0], encs[i%len(encs)])
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tr.Seal(seal[:0], plain); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
