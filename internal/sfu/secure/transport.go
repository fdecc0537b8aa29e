package secure

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/dtls/v3"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"
)

// TransportConfig is what a Transport needs of the SFU.
type TransportConfig struct {
	// Fingerprints are the browser's certificate's, from its description:
	// the handshake fails unless its certificate matches one.
	Fingerprints []Fingerprint
	// Send sends a DTLS datagram to the browser (from the media socket
	// its connection uses).
	Send func(p []byte, to netip.AddrPort) error
	// Done is told once how the handshake ended: nil once the SRTP
	// contexts are ready, else why it failed.
	Done func(error)
	// HandshakeTimeout bounds the handshake from its start (0: 30 s, as
	// a browser's ICE gives up).
	HandshakeTimeout time.Duration
	// Client: the SFU is the DTLS client (the browser answered the SFU's
	// actpass with passive, or offered passive): it starts the handshake
	// once ICE has bound the connection (Connect). Else it is the server
	// and the browser's first record starts it.
	Client bool
}

// Profiles are the SRTP protection profiles the SFU accepts, in its order
// of preference: AES-GCM (RFC 7714), which browsers offer first and AES-NI
// makes cheap, then the mandatory AES-CM with HMAC-SHA1-80 (RFC 5764).
func Profiles() []dtls.SRTPProtectionProfile {
	return []dtls.SRTPProtectionProfile{dtls.SRTP_AEAD_AES_128_GCM, dtls.SRTP_AES128_CM_HMAC_SHA1_80}
}

// Replay windows (RFC 3711 3.3.2 asks at least 64): video comes in bursts
// that may be reordered, so SRTP's is wider.
const (
	srtpReplayWindow  = 1024
	srtcpReplayWindow = 256
)

// Transport is one PeerConnection's DTLS-SRTP. The SFU offers actpass and
// answers passive where it can, so browsers (which answer actpass with
// active) are DTLS clients and the SFU the server; a peer that takes the
// server's role (pion answering an ICE-lite offerer, a passive offer)
// gets the SFU as its client. Once the handshake is done it opens and
// seals the connection's SRTP and SRTCP (Open, Seal; safe for concurrent
// use).
type Transport struct {
	id  *Identity
	cfg TransportConfig

	pipe      *pipe
	started   sync.Once
	cancel    context.CancelFunc
	done      chan struct{} // the handshake goroutine ended
	closeOnce sync.Once

	ready   atomic.Bool
	profile atomic.Value // dtls.SRTPProtectionProfile, once ready
	in, out sealer       // remote's keys (open) and ours (seal)
}

// sealer is one direction's SRTP context; pion's contexts are not safe
// for concurrent use, so each has its lock.
type sealer struct {
	mu  sync.Mutex
	ctx *srtp.Context
	// The headers pion/srtp parses into, reused packet after packet (a
	// nil header is a new allocation each time).
	rtp  rtp.Header
	rtcp rtcp.Header
}

// NewTransport is a transport that has not started its handshake: a
// server starts at the browser's first DTLS record (Handle), a client
// once ICE has bound the connection (Connect).
func (id *Identity) NewTransport(cfg TransportConfig) (*Transport, error) {
	if len(cfg.Fingerprints) == 0 {
		return nil, errors.New("secure: a transport needs the peer's certificate fingerprint")
	}
	if cfg.Send == nil {
		return nil, errors.New("secure: a transport needs a way to send")
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = 30 * time.Second
	}
	t := &Transport{id: id, cfg: cfg, done: make(chan struct{})}
	t.pipe = newPipe(cfg.Send)
	return t, nil
}

// Handle takes a DTLS datagram (first byte 20-63, RFC 7983) that came from
// the connection's address `from`; replies go to the latest such address.
// A server's handshake starts with it.
func (t *Transport) Handle(p []byte, from netip.AddrPort) {
	t.pipe.deliver(p, from)
	if !t.cfg.Client {
		t.start()
	}
}

// Connect tells the transport the address ICE bound the connection to: a
// client starts its handshake there (once).
func (t *Transport) Connect(remote netip.AddrPort) {
	if !t.cfg.Client {
		return
	}
	t.pipe.setRemote(remote)
	t.start()
}

func (t *Transport) start() {
	t.started.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), t.cfg.HandshakeTimeout)
		t.cancel = cancel
		go t.handshake(ctx)
	})
}

func (t *Transport) handshake(ctx context.Context) {
	err := t.run(ctx)
	t.cancel()
	close(t.done) // before Done: whoever hears it may be closing t
	if t.cfg.Done != nil {
		t.cfg.Done(err)
	}
}

func (t *Transport) run(ctx context.Context) error {
	opts := []dtls.Option{
		dtls.WithCertificates(t.id.cert),
		dtls.WithSRTPProtectionProfiles(Profiles()...),
		dtls.WithExtendedMasterSecret(dtls.RequireExtendedMasterSecret),
		// The chain is not what authenticates a browser (its certificate
		// is self-signed): its fingerprint in the signaling is.
		dtls.WithInsecureSkipVerify(true),
		dtls.WithVerifyPeerCertificate(t.verify),
	}
	var conn *dtls.Conn
	var err error
	if t.cfg.Client {
		copts := make([]dtls.ClientOption, 0, len(opts))
		for _, o := range opts {
			copts = append(copts, o)
		}
		conn, err = dtls.ClientWithOptions(t.pipe, t.pipe.remoteAddr(), copts...)
	} else {
		sopts := []dtls.ServerOption{dtls.WithClientAuth(dtls.RequireAnyClientCert)}
		for _, o := range opts {
			sopts = append(sopts, o)
		}
		conn, err = dtls.ServerWithOptions(t.pipe, t.pipe.remoteAddr(), sopts...)
	}
	if err != nil {
		return fmt.Errorf("secure: DTLS: %w", err)
	}
	if err := conn.HandshakeContext(ctx); err != nil {
		_ = conn.Close()
		return fmt.Errorf("secure: DTLS handshake: %w", err)
	}
	err = t.startSRTP(conn)
	// The connection stays for the browser's alerts and retransmitted
	// finished messages; records after the handshake are read and
	// dropped (no data channels here) until the transport closes.
	go drain(conn)
	return err
}

func drain(conn *dtls.Conn) {
	buf := make([]byte, 1500)
	for {
		if _, err := conn.Read(buf); err != nil {
			_ = conn.Close()
			return
		}
	}
}

func (t *Transport) verify(raw [][]byte, _ [][]*x509.Certificate) error {
	if len(raw) == 0 {
		return errors.New("secure: the peer sent no certificate")
	}
	cert, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return fmt.Errorf("secure: the peer's certificate: %w", err)
	}
	for _, f := range t.cfg.Fingerprints {
		if f.matches(cert) {
			return nil
		}
	}
	return errFingerprint
}

// startSRTP derives both directions' keys from the handshake (RFC 5764
// 4.2) and makes the contexts.
func (t *Transport) startSRTP(conn *dtls.Conn) error {
	dp, ok := conn.SelectedSRTPProtectionProfile()
	if !ok {
		return errors.New("secure: DTLS negotiated no SRTP protection profile")
	}
	var profile srtp.ProtectionProfile
	switch dp {
	case dtls.SRTP_AEAD_AES_128_GCM:
		profile = srtp.ProtectionProfileAeadAes128Gcm
	case dtls.SRTP_AES128_CM_HMAC_SHA1_80:
		profile = srtp.ProtectionProfileAes128CmHmacSha1_80
	default:
		return fmt.Errorf("secure: protection profile %v", dp)
	}
	state, ok := conn.ConnectionState()
	if !ok {
		return errors.New("secure: no DTLS state")
	}
	cfg := srtp.Config{Profile: profile}
	if err := cfg.ExtractSessionKeysFromDTLS(&state, t.cfg.Client); err != nil {
		return fmt.Errorf("secure: keys: %w", err)
	}
	in, err := srtp.CreateContext(cfg.Keys.RemoteMasterKey, cfg.Keys.RemoteMasterSalt, profile,
		srtp.SRTPReplayProtection(srtpReplayWindow), srtp.SRTCPReplayProtection(srtcpReplayWindow))
	if err != nil {
		return fmt.Errorf("secure: SRTP: %w", err)
	}
	out, err := srtp.CreateContext(cfg.Keys.LocalMasterKey, cfg.Keys.LocalMasterSalt, profile)
	if err != nil {
		return fmt.Errorf("secure: SRTP: %w", err)
	}
	clear(cfg.Keys.LocalMasterKey)
	clear(cfg.Keys.RemoteMasterKey)
	t.in.ctx, t.out.ctx = in, out
	t.profile.Store(dp)
	t.ready.Store(true)
	return nil
}

// Ready says whether the handshake is done and the keys are there.
func (t *Transport) Ready() bool { return t.ready.Load() }

// Profile is the negotiated SRTP protection profile (once ready).
func (t *Transport) Profile() (dtls.SRTPProtectionProfile, bool) {
	p, ok := t.profile.Load().(dtls.SRTPProtectionProfile)
	return p, ok
}

// Overhead is what Seal adds to an RTP packet: the authentication tag
// (16 bytes with AES-GCM, 10 with HMAC-SHA1-80), 0 before keys.
func (t *Transport) Overhead() int {
	switch p, _ := t.Profile(); p {
	case dtls.SRTP_AEAD_AES_128_GCM:
		return 16
	case dtls.SRTP_AES128_CM_HMAC_SHA1_80:
		return 10
	}
	return 0
}

// ErrNotReady: no keys yet (or any more).
var ErrNotReady = errors.New("secure: the transport has no keys")

// Open authenticates and decrypts an SRTP or SRTCP packet (told apart as
// RFC 5761 says) into dst's storage and returns the plain packet. A
// forged, replayed or truncated packet is an error.
func (t *Transport) Open(dst, p []byte) ([]byte, error) {
	if !t.ready.Load() {
		return nil, ErrNotReady
	}
	t.in.mu.Lock()
	defer t.in.mu.Unlock()
	if t.in.ctx == nil {
		return nil, ErrNotReady
	}
	if isRTCP(p) {
		return t.in.ctx.DecryptRTCP(dst, p, &t.in.rtcp)
	}
	return t.in.ctx.DecryptRTP(dst, p, &t.in.rtp)
}

// Seal encrypts and authenticates a plain RTP or RTCP packet into dst's
// storage.
func (t *Transport) Seal(dst, p []byte) ([]byte, error) {
	if !t.ready.Load() {
		return nil, ErrNotReady
	}
	t.out.mu.Lock()
	defer t.out.mu.Unlock()
	if t.out.ctx == nil {
		return nil, ErrNotReady
	}
	if isRTCP(p) {
		return t.out.ctx.EncryptRTCP(dst, p, &t.out.rtcp)
	}
	return t.out.ctx.EncryptRTP(dst, p, &t.out.rtp)
}

// isRTCP: RFC 5761 4, RTCP packet types 192-223 in the second byte.
func isRTCP(p []byte) bool { return len(p) > 1 && p[1] >= 192 && p[1] <= 223 }

// Close ends the handshake if it runs and drops the keys. Done may still
// be told of the handshake after Close returns.
func (t *Transport) Close() {
	t.closeOnce.Do(func() {
		t.ready.Store(false)
		t.pipe.close()
		t.started.Do(func() { close(t.done) }) // never started
		<-t.done
		t.in.mu.Lock()
		t.in.ctx = nil
		t.in.mu.Unlock()
		t.out.mu.Lock()
		t.out.ctx = nil
		t.out.mu.Unlock()
		t.ready.Store(false) // (a handshake that ended meanwhile)
	})
}

// pipe is the DTLS connection's packet conn: datagrams the data plane
// hands over, replies through the media socket to the latest address.
type pipe struct {
	send   func([]byte, netip.AddrPort) error
	in     chan []byte
	closed chan struct{}
	once   sync.Once

	mu       sync.Mutex
	remote   netip.AddrPort
	deadline time.Time
	changed  chan struct{} // closed when the deadline changes
}

// pipeQueue bounds what waits for the handshake: a flight is a handful
// of records; more is dropped (a flood costs nothing but the drop).
const pipeQueue = 64

func newPipe(send func([]byte, netip.AddrPort) error) *pipe {
	return &pipe{send: send, in: make(chan []byte, pipeQueue), closed: make(chan struct{}), changed: make(chan struct{})}
}

func (p *pipe) deliver(b []byte, from netip.AddrPort) {
	p.mu.Lock()
	p.remote = from
	p.mu.Unlock()
	select {
	case p.in <- append([]byte(nil), b...):
	default:
	}
}

func (p *pipe) setRemote(a netip.AddrPort) {
	p.mu.Lock()
	p.remote = a
	p.mu.Unlock()
}

func (p *pipe) remoteAddr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return net.UDPAddrFromAddrPort(p.remote)
}

func (p *pipe) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, again, err := p.readOnce(b)
		if !again {
			return n, p.remoteAddr(), err
		}
	}
}

// readOnce waits for a datagram until the deadline, or until the
// deadline changes (again).
func (p *pipe) readOnce(b []byte) (n int, again bool, err error) {
	p.mu.Lock()
	deadline, changed := p.deadline, p.changed
	p.mu.Unlock()
	var expire <-chan time.Time
	if !deadline.IsZero() {
		d := time.Until(deadline)
		if d <= 0 {
			return 0, false, timeoutError{}
		}
		timer := time.NewTimer(d)
		defer timer.Stop()
		expire = timer.C
	}
	select {
	case d := <-p.in:
		return copy(b, d), false, nil
	case <-p.closed:
		return 0, false, net.ErrClosed
	case <-expire:
		return 0, false, timeoutError{}
	case <-changed:
		return 0, true, nil
	}
}

func (p *pipe) WriteTo(b []byte, _ net.Addr) (int, error) {
	select {
	case <-p.closed:
		return 0, net.ErrClosed
	default:
	}
	p.mu.Lock()
	to := p.remote
	p.mu.Unlock()
	if err := p.send(b, to); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (p *pipe) close() { p.once.Do(func() { close(p.closed) }) }

func (p *pipe) Close() error { p.close(); return nil }

func (p *pipe) LocalAddr() net.Addr { return &net.UDPAddr{} }

func (p *pipe) SetDeadline(t time.Time) error { return p.SetReadDeadline(t) }

func (p *pipe) SetReadDeadline(t time.Time) error {
	p.mu.Lock()
	p.deadline = t
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	return nil
}

func (p *pipe) SetWriteDeadline(time.Time) error { return nil }

type timeoutError struct{}

func (timeoutError) Error() string   { return "secure: read deadline" }
func (timeoutError) Timeout() bool   { return true }
func (timeoutError) Temporary() bool { return true }
