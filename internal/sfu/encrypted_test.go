package sfu

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/pion/dtls/v3"
	"github.com/pion/ice/v4"
	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
	"github.com/ebrtc/ebrtc/internal/sfu/web"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// plainMarker starts every payload the participants send: found in a
// datagram on the wire, it would be plain RTP.
var plainMarker = []byte("ebrtc-plaintext!")

// An encrypted meeting of pion/webrtc participants (DTLS-SRTP on every
// connection, as browsers ship) through ebrtc sfu's defaults on loopback:
// each receives every other's audio and video, every packet once, the
// payload as sent, though one negotiated AES-GCM and another AES-CM with
// HMAC-SHA1 (decrypted once, encrypted per receiver); no datagram any of
// them receives carries a payload in the clear. Forged, replayed and
// truncated SRTP from a participant's own address, DTLS garbage, and SRTP
// from an address nobody checked are dropped and counted, and nobody gets
// an extra packet. A participant whose certificate is not the one its
// descriptions name gets no keys: nothing goes to it, nothing of its
// reaches anyone, and the others lose nothing. One leaves and rejoins and
// is seen and sees again.
func TestEncryptedMeeting(t *testing.T) {
	s := startEncryptedSFU(t)
	a := s.join(t, "alice", nil)
	b := s.join(t, "bob", nil)
	c := s.join(t, "carol", []dtls.SRTPProtectionProfile{dtls.SRTP_AES128_CM_HMAC_SHA1_80})
	everyone := []*participant{a, b, c}
	for _, p := range everyone {
		p.startSending()
	}
	waitReceiving(t, everyone, 50, s)
	for _, p := range everyone {
		want := map[bool]string{true: "SRTP_AES128_CM_HMAC_SHA1_80", false: "SRTP_AEAD_AES_128_GCM"}[p == c]
		if got := p.pubCipher(); got != want {
			t.Errorf("%s negotiated %q, want %s", p.name, got, want)
		}
	}

	// Forgeries from alice's own address, garbage DTLS, SRTP from a stranger.
	before := s.outcomes(t)
	sent := a.pubTap.lastSRTP()
	forged := append([]byte(nil), sent...)
	forged[len(forged)-3] ^= 1
	stranger, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	for _, d := range [][]byte{sent, forged, sent[:20], sent[:len(sent)-1]} {
		a.pubTap.inject(d, s.media)
	}
	a.pubTap.inject(append([]byte{23, 0xfe, 0xfd}, bytes.Repeat([]byte{0xaa}, 60)...), s.media)
	for range 5 {
		stranger.WriteToUDPAddrPort(sent, s.media)
	}
	// (A stranger's datagrams are held a second, as a connection's before
	// its keys: dataplane/early.go. Counted when they are dropped.)
	after := s.outcomes(t)
	for deadline := time.Now().Add(3 * time.Second); after[dataplane.Unprotected].Packets-before[dataplane.Unprotected].Packets < 5 && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		after = s.outcomes(t)
	}
	if d := after[dataplane.Unauthentic].Packets - before[dataplane.Unauthentic].Packets; d != 4 {
		t.Errorf("unauthentic: %d more, want the replayed, forged and two truncated packets", d)
	}
	if d := after[dataplane.Unprotected].Packets - before[dataplane.Unprotected].Packets; d != 5 {
		t.Errorf("unprotected: %d more, want the stranger's 5", d)
	}
	if d := after[dataplane.DTLS].Packets - before[dataplane.DTLS].Packets; d < 1 {
		t.Errorf("DTLS garbage not counted")
	}

	// An impostor: its descriptions name another certificate.
	e := s.join(t, "eve", nil, func(sdp string) string { return swapFingerprint(t, sdp) })
	e.startSending()
	time.Sleep(3 * time.Second)
	for _, p := range everyone {
		if n := p.received(e.id); n != 0 {
			t.Errorf("%s received %d packets of the impostor's", p.name, n)
		}
	}
	if n := e.receivedAll(); n != 0 {
		t.Errorf("the impostor received %d packets", n)
	}

	// Carol leaves and rejoins.
	c.leave()
	c2 := s.join(t, "carol2", nil)
	c2.startSending()
	everyone = []*participant{a, b, c2}
	waitReceiving(t, everyone, 50, s)

	for _, p := range []*participant{a, b, c, c2, e} {
		p.leave()
	}
	for _, p := range []*participant{a, b, c, c2} {
		p.checkStreams(t)
	}
	for _, p := range []*participant{a, b, c, c2, e} {
		if n := p.plainSeen(); n != 0 {
			t.Errorf("%s received %d datagrams with a payload in the clear", p.name, n)
		}
	}
	if d := s.outcomes(t); d[dataplane.Replica].Packets == 0 {
		t.Error("no replicas counted")
	}
}

// encryptedSFU is ebrtc sfu with its defaults (DTLS-SRTP, the user data
// plane, the page over HTTPS with a self-signed certificate) on loopback,
// in this process.
type encryptedSFU struct {
	web   string
	media netip.AddrPort
	plane dataplane.Plane
	roots *x509.CertPool // the self-signed web certificate
}

func startEncryptedSFU(t *testing.T) *encryptedSFU {
	t.Helper()
	probe, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	media := probe.LocalAddr().(*net.UDPAddr).AddrPort()
	probe.Close()
	ready := make(chan *encryptedSFU, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	state := t.TempDir()
	cfg := Config{Listen: "127.0.0.1:0", Web: web.TLS{Dir: state}, Media: []netip.AddrPort{media}, Codecs: signaling.Codecs{Audio: "opus", Video: "VP8"},
		Access:           access.Config{Secret: []byte(testbed.SFUTokenSecret), JoinRate: testbed.SFUJoinRate, JoinBurst: testbed.SFUJoinRate},
		NoRateAdaptation: true, Log: testLog(),
		Ready: func(addr net.Addr, plane dataplane.Plane) {
			ready <- &encryptedSFU{web: addr.String(), media: media, plane: plane}
		}}
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sfu: %v", err)
		}
	})
	select {
	case s := <-ready:
		pem, err := os.ReadFile(filepath.Join(state, "sfu-web.crt"))
		if err != nil {
			t.Fatalf("the self-signed web certificate: %v", err)
		}
		s.roots = x509.NewCertPool()
		s.roots.AppendCertsFromPEM(pem)
		return s
	case err := <-done:
		t.Fatalf("sfu: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("sfu not ready in 10 s")
	}
	return nil
}

func (s *encryptedSFU) outcomes(t *testing.T) map[dataplane.Outcome]dataplane.Counter {
	t.Helper()
	o, err := s.plane.Outcomes()
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// participant is a pion/webrtc peer speaking the meeting page's
// signaling: one send-only connection, a receive-only one per publisher,
// each on a socket of its own (a browser's way; the SFU tells legs apart
// by address).
type participant struct {
	t        *testing.T
	name, id string
	ws       *websocket.Conn
	profiles []dtls.SRTPProtectionProfile
	rewrite  func(string) string

	pub          *webrtc.PeerConnection
	pubTap       *tap
	audio, video *webrtc.TrackLocalStaticRTP
	stop         chan struct{}
	sending      sync.WaitGroup

	mu    sync.Mutex
	recvs []*webrtc.PeerConnection
	taps  []*tap
	got   map[string]map[string][]uint32 // publisher id, kind: counters in arrival order
	left  bool
}

func (s *encryptedSFU) join(t *testing.T, name string, profiles []dtls.SRTPProtectionProfile, rewrite ...func(string) string) *participant {
	t.Helper()
	// WSS, the certificate checked, from a page of the SFU's own origin.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.roots, ServerName: "127.0.0.1"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "wss://"+s.web+"/ws", &websocket.DialOptions{HTTPClient: client,
		HTTPHeader: http.Header{"Origin": {"https://" + s.web}}})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(1 << 20)
	p := &participant{t: t, name: name, ws: ws, profiles: profiles, stop: make(chan struct{}), got: map[string]map[string][]uint32{},
		rewrite: func(s string) string { return s }}
	if len(rewrite) > 0 {
		p.rewrite = rewrite[0]
	}
	t.Cleanup(p.leave)
	testenv.Must(t, p.send(map[string]string{"type": "join", "token": testbed.SFUToken("encrypted", name)}))
	joined := p.expect("joined")
	p.id = joined.ID
	if joined.Media != "encrypted" {
		t.Errorf("%s joined a room whose media is %q, want encrypted", name, joined.Media)
	}
	if p.pub, p.pubTap, err = p.peer(); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"audio", "video"} {
		mime := map[string]string{"audio": webrtc.MimeTypeOpus, "video": webrtc.MimeTypeVP8}[kind]
		tr, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: mime}, kind, name)
		testenv.Must(t, err)
		_, err = p.pub.AddTransceiverFromTrack(tr, webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
		testenv.Must(t, err)
		if kind == "audio" {
			p.audio = tr
		} else {
			p.video = tr
		}
	}
	offer := p.describe(p.pub, func() (webrtc.SessionDescription, error) { return p.pub.CreateOffer(nil) })
	testenv.Must(t, p.send(map[string]string{"type": "publish", "sdp": p.rewrite(offer)}))
	go p.signaling()
	return p
}

// send is one signaling message.
func (p *participant) send(m map[string]string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return wsjson.Write(ctx, p.ws, m)
}

// signaling takes the SFU's answer and offers until the socket closes.
// An answer for a stream that left meanwhile (carol's, offered to carol2
// as it joins while carol's leaving is on its way) is refused: not an
// error of the SFU's.
func (p *participant) signaling() {
	gone := map[string]bool{}
	for {
		var m struct{ Type, ID, SDP, Text string }
		if err := wsjson.Read(context.Background(), p.ws, &m); err != nil {
			return
		}
		switch m.Type {
		case "answer":
			if err := p.pub.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: m.SDP}); err != nil {
				p.t.Errorf("%s: the SFU's answer: %v", p.name, err)
			}
		case "offer":
			p.receive(m.ID, m.SDP)
		case "left":
			gone[m.ID] = true
		case "error":
			if !answeredGone(m.Text, gone) {
				p.t.Errorf("%s: the SFU says %s", p.name, m.Text)
			}
		}
	}
}

// answeredGone: the SFU refused an answer for a stream that has left.
func answeredGone(text string, gone map[string]bool) bool {
	for id := range gone {
		if strings.Contains(text, fmt.Sprintf("no offer for stream %q", id)) {
			return true
		}
	}
	return false
}

func (p *participant) expect(typ string) (m struct{ Type, ID, SDP, Text, Media string }) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		if err := wsjson.Read(ctx, p.ws, &m); err != nil {
			p.t.Fatalf("%s: waiting for %q: %v", p.name, typ, err)
		}
		if m.Type == typ {
			return m
		}
	}
}

// receive answers the SFU's offer of publisher's stream on a new
// connection and records what arrives.
func (p *participant) receive(publisher, offer string) {
	pc, tp, err := p.peer()
	if err != nil {
		p.t.Errorf("%s: %v", p.name, err)
		return
	}
	p.mu.Lock()
	if p.left {
		p.mu.Unlock()
		pc.Close()
		return
	}
	p.recvs, p.taps = append(p.recvs, pc), append(p.taps, tp)
	p.mu.Unlock()
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		for {
			pkt, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			kind, n, ok := parsePayload(pkt.Payload)
			if !ok {
				p.t.Errorf("%s: a packet of %s's with a payload not as sent: % x", p.name, publisher, pkt.Payload[:min(len(pkt.Payload), 32)])
				continue
			}
			p.mu.Lock()
			if p.got[publisher] == nil {
				p.got[publisher] = map[string][]uint32{}
			}
			p.got[publisher][kind] = append(p.got[publisher][kind], n)
			p.mu.Unlock()
		}
	})
	if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: offer}); err != nil {
		p.t.Errorf("%s: the SFU's offer: %v", p.name, err)
		return
	}
	answer := p.describe(pc, func() (webrtc.SessionDescription, error) { return pc.CreateAnswer(nil) })
	if err := p.send(map[string]string{"type": "answer", "id": publisher, "sdp": p.rewrite(answer)}); err != nil {
		p.t.Logf("%s: answer: %v", p.name, err)
	}
}

func (p *participant) describe(pc *webrtc.PeerConnection, create func() (webrtc.SessionDescription, error)) string {
	d, err := create()
	testenv.Must(p.t, err)
	gathered := webrtc.GatheringCompletePromise(pc)
	testenv.Must(p.t, pc.SetLocalDescription(d))
	select {
	case <-gathered:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("%s: ICE gathering", p.name)
	}
	return pc.LocalDescription().SDP
}

// peer is a connection on a loopback socket of its own.
func (p *participant) peer() (*webrtc.PeerConnection, *tap, error) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, nil, err
	}
	tp := &tap{UDPConn: conn}
	var se webrtc.SettingEngine
	se.SetICEUDPMux(webrtc.NewICEUDPMux(nil, tp))
	se.SetIncludeLoopbackCandidate(true)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	if len(p.profiles) > 0 {
		se.SetSRTPProtectionProfiles(p.profiles...)
	}
	var me webrtc.MediaEngine
	if err := me.RegisterDefaultCodecs(); err != nil {
		return nil, nil, err
	}
	pc, err := webrtc.NewAPI(webrtc.WithSettingEngine(se), webrtc.WithMediaEngine(&me)).NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return pc, tp, nil
}

// startSending sends audio and video every 10 ms: each payload the
// marker, the kind and a counter (video: a VP8 descriptor first, a key
// frame every 10th packet, each packet a frame).
func (p *participant) startSending() {
	p.sending.Add(1)
	go func() {
		defer p.sending.Done()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for n := uint32(0); ; n++ {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			vp8 := []byte{0x10, 0x01} // S, partition 0; P set: an inter frame
			if n%10 == 0 {
				vp8[1] = 0x00 // a key frame
			}
			_ = p.audio.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(n), Timestamp: 960 * n, Marker: true}, Payload: payload("audio", n)})
			_ = p.video.WriteRTP(&rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(n), Timestamp: 3000 * n, Marker: true}, Payload: append(vp8, payload("video", n)...)})
		}
	}()
}

func payload(kind string, n uint32) []byte {
	b := append(append([]byte(nil), plainMarker...), kind[0])
	b = binary.BigEndian.AppendUint32(b, n)
	return append(b, bytes.Repeat([]byte{byte(n)}, 200)...)
}

// parsePayload reads what payload wrote (after a VP8 descriptor).
func parsePayload(b []byte) (string, uint32, bool) {
	if i := bytes.Index(b, plainMarker); i == 0 || i == 2 {
		b = b[i+len(plainMarker):]
		if len(b) == 205 && bytes.Equal(b[5:], bytes.Repeat([]byte{b[4]}, 200)) {
			kind := map[byte]string{'a': "audio", 'v': "video"}[b[0]]
			return kind, binary.BigEndian.Uint32(b[1:]), kind != "" && (kind == "video") == (i == 2)
		}
	}
	return "", 0, false
}

// pubCipher is the SRTP protection profile its send-only connection
// negotiated.
func (p *participant) pubCipher() string {
	for _, st := range p.pub.GetStats() {
		if ts, ok := st.(webrtc.TransportStats); ok && ts.SRTPCipher != "" {
			return ts.SRTPCipher
		}
	}
	return ""
}

func (p *participant) received(publisher string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.got[publisher] {
		n += len(c)
	}
	return n
}

func (p *participant) receivedAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, byKind := range p.got {
		for _, c := range byKind {
			n += len(c)
		}
	}
	return n
}

// checkStreams: from each publisher, each kind's counters arrived once
// each and in order, none missing after the first (loopback loses none).
func (p *participant) checkStreams(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for pub, byKind := range p.got {
		for kind, ns := range byKind {
			for i := 1; i < len(ns); i++ {
				if ns[i] != ns[i-1]+1 {
					t.Errorf("%s from %s, %s: counter %d after %d (packet %d of %d)", p.name, pub, kind, ns[i], ns[i-1], i, len(ns))
					break
				}
			}
		}
	}
}

func (p *participant) plainSeen() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.pubTap.plain.Load()
	for _, tp := range p.taps {
		n += tp.plain.Load()
	}
	return n
}

func (p *participant) leave() {
	p.mu.Lock()
	if p.left {
		p.mu.Unlock()
		return
	}
	p.left = true
	recvs := p.recvs
	p.mu.Unlock()
	close(p.stop)
	p.sending.Wait()
	p.ws.Close(websocket.StatusNormalClosure, "leaving")
	p.pub.Close()
	for _, pc := range recvs {
		pc.Close()
	}
	// A PeerConnection does not close the socket of the UDP mux it was
	// given: its reader would outlive the test.
	p.pubTap.Close()
	p.mu.Lock()
	for _, tp := range p.taps {
		tp.Close()
	}
	p.mu.Unlock()
}

// waitReceiving waits until each participant has n packets of each kind
// from every other.
func waitReceiving(t *testing.T, ps []*participant, n int, s *encryptedSFU) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		missing := ""
		for _, p := range ps {
			for _, q := range ps {
				if p == q {
					continue
				}
				p.mu.Lock()
				if a, v := len(p.got[q.id]["audio"]), len(p.got[q.id]["video"]); a < n || v < n {
					missing = fmt.Sprintf("%s has %d audio and %d video packets of %s's", p.name, a, v, q.name)
				}
				p.mu.Unlock()
			}
		}
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s: %s; the data plane: %v", missing, s.outcomes(t))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// swapFingerprint names another certificate in a description.
func swapFingerprint(t *testing.T, sdp string) string {
	i := strings.Index(sdp, "a=fingerprint:sha-256 ")
	if i < 0 {
		t.Fatal("no fingerprint to swap")
	}
	j := i + len("a=fingerprint:sha-256 ")
	flip := map[byte]byte{'0': '1', '1': '0', 'A': 'B', 'B': 'A'}
	out := []byte(sdp)
	for k := j; k < len(out) && out[k] != '\r'; k++ {
		if f, ok := flip[out[k]]; ok {
			out[k] = f
		} else if out[k] != ':' {
			out[k] = '0'
		}
	}
	return strings.ReplaceAll(string(out), sdp[i:strings.Index(sdp[i:], "\r")+i], string(out[i:strings.Index(string(out[i:]), "\r")+i]))
}

// tap is a participant connection's socket: it notices a datagram that
// carries a payload in the clear, keeps the last SRTP one sent, and can
// send a datagram of the test's from the same address.
type tap struct {
	*net.UDPConn
	plain atomic.Int64
	mu    sync.Mutex
	last  []byte
}

func (tp *tap) ReadFrom(b []byte) (int, net.Addr, error) {
	n, a, err := tp.UDPConn.ReadFrom(b)
	if n > 0 && bytes.Contains(b[:n], plainMarker) {
		tp.plain.Add(1)
	}
	return n, a, err
}

func (tp *tap) WriteTo(b []byte, a net.Addr) (int, error) {
	if len(b) > 12 && b[0] >= 128 && b[0] <= 191 && (b[1] < 192 || b[1] > 223) {
		tp.mu.Lock()
		tp.last = append(tp.last[:0], b...)
		tp.mu.Unlock()
	}
	if len(b) > 0 && bytes.Contains(b, plainMarker) {
		tp.plain.Add(1)
	}
	return tp.UDPConn.WriteTo(b, a)
}

func (tp *tap) lastSRTP() []byte {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.last == nil {
		panic("no SRTP sent yet")
	}
	return append([]byte(nil), tp.last...)
}

func (tp *tap) inject(b []byte, to netip.AddrPort) {
	if _, err := tp.UDPConn.WriteToUDPAddrPort(b, to); err != nil {
		panic(err)
	}
}

// testLog is the SFU's log: EBRTC_TEST_LOG=debug shows it.
func testLog() *slog.Logger {
	if os.Getenv("EBRTC_TEST_LOG") == "debug" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}
