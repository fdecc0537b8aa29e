package synth

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"github.com/pion/rtcp"
	"hash/fnv"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/sfu/secure"
)

// Config of a participant.
type Config struct {
	Net    Net
	Server string // the SFU's web server, host:port
	// SignalingTLS, if set, is how signaling goes over TLS (wss), as
	// from the meeting page served over HTTPS; nil: ws.
	SignalingTLS *tls.Config
	Room         string
	// Token, if set, gives each participant its join token, for an SFU
	// whose rooms need one (an ebrtc sfu with a token secret; the
	// testbed's: testbed.SFUTokens).
	Token func() string
	IPv6  bool // media over IPv6 (else IPv4)
	// Ledger, if set, is where publishers record what they sent and
	// receivers compare what they got, byte for byte.
	Ledger *Ledger
	// RecordArrivals keeps each RTP packet's arrival time (skew).
	RecordArrivals bool
	// Janus: Server is Janus's HTTP API (VideoRoom), not ebrtc sfu.
	Janus bool
	// Estimate, if set, is the bandwidth estimate (bits/s) it reports for
	// every stream it receives, in a REMB every estimateEvery, as a
	// receiver on a link that narrow would.
	Estimate float64
	// TWCC: as a receiver, negotiate transport-wide congestion control as
	// browsers do (the SFU numbers each replica for it; no feedback is
	// sent, so its estimate of us shows no limit).
	TWCC bool
	// Encrypted: DTLS-SRTP on every connection, as browsers as they ship
	// (ebrtc sfu's default, Janus's): the participant seals what it sends
	// and opens what it receives.
	Encrypted bool
	// Plain: as a publisher, offer neither NACKs nor transport-wide
	// numbers (nack, transport-cc and that header extension stripped), as
	// a plain RTP sender: the SFU keeps no history of the stream and its
	// receivers get no transport-wide numbers.
	Plain bool
}

// Participant is one synthetic member of a room: it may publish a
// recording's stream, and it receives every other publisher's, each on a
// connection of its own (as a browser's receive-only PeerConnections).
type Participant struct {
	ID       string
	cfg      Config
	sess     signalingSession
	identity *secure.Identity // Config.Encrypted: its DTLS certificate

	sent atomic.Uint64 // RTP packets Send sent
	late atomic.Uint64 // of them, sent over 20 ms after they were due

	mu       sync.Mutex
	pub      *connection
	stream   *Stream
	incoming map[string]*Incoming // by publisher id
	errs     []error
	sockets  []*net.UDPConn      // every socket opened, closed by Leave
	secured  []*secure.Transport // every connection's DTLS-SRTP, closed by Leave (its keys dropped)
	left     bool
	leave    sync.Once
	wg       sync.WaitGroup
	done     chan struct{}
}

// connection is one ICE-bound socket to the SFU, and its DTLS-SRTP
// (Config.Encrypted; nil: plain).
type connection struct {
	conn      *net.UDPConn
	local     localICE
	remote    remoteICE
	tr        *secure.Transport
	handshake chan error // how tr's handshake ended
}

// Join enters the room through the SFU's signaling. It answers every
// stream the SFU offers it from then on.
func Join(cfg Config) (*Participant, error) {
	var s signalingSession
	var err error
	if cfg.Janus {
		s, err = joinJanus(cfg.Net, cfg.Server, cfg.Room)
	} else {
		var token string
		if cfg.Token != nil {
			token = cfg.Token()
		}
		s, err = join(cfg.Net, cfg.Server, cfg.Room, token, cfg.SignalingTLS)
	}
	if err != nil {
		return nil, err
	}
	p := &Participant{ID: s.participantID(), cfg: cfg, sess: s, incoming: map[string]*Incoming{}, done: make(chan struct{})}
	if cfg.Encrypted {
		if p.identity, err = secure.NewIdentity(); err != nil {
			s.close()
			return nil, err
		}
	}
	p.wg.Add(1)
	go p.signaling()
	return p, nil
}

// listen opens a socket that stamps what it receives with the kernel's
// arrival time (SO_TIMESTAMPNS): jitter and skew measured without this
// process's scheduling in them.
func (p *Participant) listen() (*net.UDPConn, error) {
	ip := net.IPv4zero
	if p.cfg.IPv6 {
		ip = net.IPv6unspecified
	}
	c, err := p.cfg.Net.ListenUDP(&net.UDPAddr{IP: ip})
	if err != nil {
		return nil, err
	}
	raw, err := c.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1) })
		err = errors.Join(err, cerr)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("synth: SO_TIMESTAMPNS: %w", err)
	}
	return c, nil
}

// media opens a connection's socket (closed by Leave) and the ICE
// credentials and candidates we describe it with.
func (p *Participant) media() (*net.UDPConn, localICE, error) {
	conn, err := p.listen()
	if err != nil {
		return nil, localICE{}, err
	}
	if err := p.own(conn); err != nil {
		return nil, localICE{}, err
	}
	local := newLocalICE()
	if ip := p.sess.candidateIP(); ip.IsValid() {
		local.Candidate = netip.AddrPortFrom(ip, uint16(conn.LocalAddr().(*net.UDPAddr).Port))
	}
	return conn, local, nil
}

// bind runs connectivity checks from conn to the SFU until bound; an
// encrypted participant's connection gets its DTLS-SRTP transport (the
// caller's reader hands it DTLS, then waits for handshakeDone).
func (p *Participant) bind(conn *net.UDPConn, local localICE, desc string) (*connection, error) {
	remote, err := iceOf(desc, !p.cfg.IPv6)
	if err != nil {
		return nil, err
	}
	if err := connect(conn, local, &remote); err != nil {
		return nil, err
	}
	c := &connection{conn: conn, local: local, remote: remote}
	if p.identity != nil {
		if err := p.secureConnection(c, desc); err != nil {
			return nil, err
		}
		p.mu.Lock()
		left := p.left
		if !left {
			p.secured = append(p.secured, c.tr)
		}
		p.mu.Unlock()
		if left {
			c.tr.Close()
			return nil, errors.New("synth: the participant left")
		}
	}
	p.wg.Add(1)
	go p.keepConsent(c)
	return c, nil
}

// own makes Leave close conn; after Leave, it closes conn at once and
// says so: an offer answered while the participant leaves opens nothing
// that outlives it.
func (p *Participant) own(conn *net.UDPConn) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.left {
		conn.Close()
		return errors.New("synth: the participant left")
	}
	p.sockets = append(p.sockets, conn)
	return nil
}

// keepConsent refreshes the SFU's consent on c until the participant leaves.
func (p *Participant) keepConsent(c *connection) {
	p.every(consentEvery, func() {
		if req, err := bindingRequest(c.local, c.remote); err == nil {
			_, _ = c.conn.WriteToUDPAddrPort(req, c.remote.Candidate)
		}
	})
}

// every runs fn every d until the participant leaves (one wg count).
func (p *Participant) every(d time.Duration, fn func()) {
	defer p.wg.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
			fn()
		}
	}
}

const estimateEvery = 250 * time.Millisecond

// reportEstimate sends the SFU REMBs on c until the participant leaves.
func (p *Participant) reportEstimate(c *connection) {
	b, err := rtcp.Marshal([]rtcp.Packet{&rtcp.ReceiverEstimatedMaximumBitrate{SenderSSRC: 1, Bitrate: float32(p.cfg.Estimate), SSRCs: []uint32{1}}})
	if err != nil {
		p.wg.Done()
		p.fail(err)
		return
	}
	var sealed []byte
	p.every(estimateEvery, func() {
		if sealed, err = c.seal(sealed[:0], b); err == nil { // SRTCP: an index of its own each time
			_, _ = c.conn.WriteToUDPAddrPort(sealed, c.remote.Candidate)
		}
	})
}

// Publish offers the stream; when Publish returns, the SFU has bound the
// publisher's address and will replicate what Send sends.
func (p *Participant) Publish(s *Stream) error {
	conn, local, err := p.media()
	if err != nil {
		return err
	}
	o, err := offer(local, s, p.cfg.Plain, p.identity)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.stream = s
	p.mu.Unlock()
	ans, established, err := p.sess.publish(o)
	if err != nil {
		return err
	}
	c, err := p.bind(conn, local, ans)
	if err != nil {
		return err
	}
	p.wg.Add(1)
	go p.drain(c) // feedback, consent answers, checks, DTLS
	if err := c.handshakeDone(); err != nil {
		return err
	}
	if err := established(); err != nil {
		return err
	}
	p.mu.Lock()
	p.pub = c
	p.mu.Unlock()
	return nil
}

// signaling answers offers and records the SFU's complaints.
func (p *Participant) signaling() {
	defer p.wg.Done()
	for sig := range p.sess.events() {
		if sig.err != nil {
			p.fail(sig.err)
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			if err := p.accept(sig.offer); err != nil {
				p.fail(fmt.Errorf("stream of %s: %w", sig.offer.from, err))
			}
		}()
	}
}

func (p *Participant) fail(err error) {
	p.mu.Lock()
	p.errs = append(p.errs, err)
	p.mu.Unlock()
}

// Err is what went wrong so far.
func (p *Participant) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return errors.Join(p.errs...)
}

// accept answers the SFU's offer of a publisher's stream and receives it.
func (p *Participant) accept(o *streamOffer) error {
	conn, local, err := p.media()
	if err != nil {
		return err
	}
	a, err := answer(local, o.sdp, p.cfg.TWCC, p.identity)
	if err != nil {
		return err
	}
	if err := o.answer(a); err != nil {
		return err
	}
	c, err := p.bind(conn, local, o.sdp)
	if err != nil {
		return err
	}
	in := &Incoming{From: o.from, ledger: p.cfg.Ledger, streams: map[uint32]*ssrcStats{}, port: c.conn.LocalAddr().(*net.UDPAddr).Port}
	if p.cfg.RecordArrivals {
		in.arrivals = map[uint64]time.Time{}
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		in.receive(c) // answers the SFU's checks, hands DTLS on
	}()
	if err := c.handshakeDone(); err != nil {
		return err
	}
	if err := o.established(); err != nil {
		return err
	}
	if p.cfg.Estimate > 0 {
		p.wg.Add(1)
		go p.reportEstimate(c)
	}
	p.mu.Lock()
	p.incoming[o.from] = in
	p.mu.Unlock()
	return nil
}

// AwaitStreams waits until every participant receives at least want
// streams (its connections bound), or one of them failed.
func AwaitStreams(parts []*Participant, want int, within time.Duration) error {
	for deadline := time.Now().Add(within); ; time.Sleep(20 * time.Millisecond) {
		ok := 0
		for _, p := range parts {
			if err := p.Err(); err != nil {
				return err
			}
			if len(p.Incoming()) >= want {
				ok++
			}
		}
		if ok == len(parts) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("synth: %d of %d participants receive %d streams after %v", ok, len(parts), want, within)
		}
	}
}

// Incoming returns the streams received so far, by publisher id.
func (p *Participant) Incoming() map[string]*Incoming {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]*Incoming, len(p.incoming))
	for k, v := range p.incoming {
		out[k] = v
	}
	return out
}

// drain reads a connection until it is closed, answering the SFU's checks.
func (p *Participant) drain(c *connection) {
	defer p.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := c.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if !c.handleDTLS(buf[:n], from) {
			answerCheck(c.conn, c.local, buf[:n], from)
		}
	}
}

// Send replays the published stream from packet first on, paced as
// captured (speed times faster), until ctx ends or count packets went.
// It returns how many it sent.
func (p *Participant) Send(ctx context.Context, first, count int, speed float64) (int, error) {
	p.mu.Lock()
	c, s := p.pub, p.stream
	p.mu.Unlock()
	if c == nil {
		return 0, errors.New("synth: not publishing")
	}
	start := time.Now()
	_, origin, err := s.Packet(first)
	if err != nil {
		return 0, err
	}
	var sealed []byte
	for k := first; k < first+count; k++ {
		b, at, err := s.Packet(k)
		if err != nil {
			return k - first, err
		}
		due := start.Add(time.Duration(float64(at-origin) / speed))
		wait := time.Until(due)
		if wait < -20*time.Millisecond {
			p.late.Add(1)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return k - first, nil
			case <-time.After(wait):
			}
		} else if ctx.Err() != nil {
			return k - first, nil
		}
		if p.cfg.Ledger != nil {
			p.cfg.Ledger.record(b)
		}
		if sealed, err = c.seal(sealed[:0], b); err != nil {
			return k - first, err
		}
		if _, err := c.conn.WriteToUDPAddrPort(sealed, c.remote.Candidate); err != nil {
			return k - first, err
		}
		p.sent.Add(1)
	}
	return count, nil
}

// Sent is how many RTP packets Send sent, in all, and how many of them
// over 20 ms late (the generator fell behind).
func (p *Participant) Sent() (sent, late uint64) { return p.sent.Load(), p.late.Load() }

// Publishing is the publisher's bound socket and the SFU's media address
// it sends to (to send other traffic from the same address).
func (p *Participant) Publishing() (*net.UDPConn, netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pub == nil {
		return nil, netip.AddrPort{}
	}
	return p.pub.conn, p.pub.remote.Candidate
}

// Seal is an RTP or RTCP packet as the publisher's connection sends it:
// sealed into dst's storage (SRTP, in sending order: each packet once), or
// b itself when plain.
func (p *Participant) Seal(dst, b []byte) ([]byte, error) {
	p.mu.Lock()
	c := p.pub
	p.mu.Unlock()
	if c == nil {
		return nil, errors.New("synth: not publishing")
	}
	return c.seal(dst, b)
}

// Leave closes signaling and every socket.
func (p *Participant) Leave() {
	p.leave.Do(func() {
		close(p.done)
		p.sess.close()
		p.mu.Lock()
		p.left = true
		for _, c := range p.sockets {
			c.Close()
		}
		secured := p.secured
		p.mu.Unlock()
		for _, tr := range secured {
			tr.Close()
		}
		p.wg.Wait()
	})
}

// Ledger holds what publishers sent, for receivers to check against.
type Ledger struct{ m sync.Map } // ssrc<<16|seq -> []byte

func ledgerKey(b []byte) uint64 {
	return uint64(binary.BigEndian.Uint32(b[8:]))<<16 | uint64(binary.BigEndian.Uint16(b[2:]))
}

func (l *Ledger) record(b []byte) { l.m.Store(ledgerKey(b), b) }

// Incoming is one publisher's stream as a participant received it.
type Incoming struct {
	From   string
	ledger *Ledger
	port   int // the local port it arrives on

	mu       sync.Mutex
	streams  map[uint32]*ssrcStats
	arrivals map[uint64]time.Time // payloadKey -> arrival, if recorded
	mismatch int                  // RTP not as the publisher sent it (or, encrypted, that did not open)
	reports  int                  // RTCP sender reports
}

// Port is the local UDP port the stream arrives on.
func (in *Incoming) Port() uint16 { return uint16(in.port) }

// Arrival is when the RTP packet whose PayloadKey is key arrived, if
// arrivals are recorded and it did. Packets are told apart by their
// payload: an SFU such as Janus rewrites SSRCs, sequence numbers and
// header extensions.
func (in *Incoming) Arrival(key uint64) (time.Time, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	t, ok := in.arrivals[key]
	return t, ok
}

// PayloadKey is a hash of an RTP packet's payload.
func PayloadKey(b []byte) (uint64, bool) {
	var h rtp.Header
	n, err := h.Unmarshal(b)
	if err != nil {
		return 0, false
	}
	f := fnv.New64a()
	f.Write(b[n:])
	return f.Sum64(), true
}

// ssrcStats is one SSRC's reception: distinct packets and RFC 3550 jitter.
type ssrcStats struct {
	seen      map[uint32]bool // extended sequence numbers: counts go past 65,536
	top       uint32          // the highest extended sequence number
	jitter    float64         // in timestamp units
	clock     float64         // timestamp units per second
	lastTrans float64
	started   bool
	pt        uint8
}

// Stat is one SSRC's reception.
type Stat struct {
	Packets     int
	Jitter      time.Duration
	PayloadType uint8
}

func (in *Incoming) receive(c *connection) {
	buf, oob, plain := make([]byte, 1500), make([]byte, 128), make([]byte, 1500)
	for {
		n, oobn, _, from, err := c.conn.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if c.handleDTLS(buf[:n], from) || answerCheck(c.conn, c.local, buf[:n], from) {
			continue
		}
		b, err := c.open(plain[:0], buf[:n])
		if errors.Is(err, secure.ErrNotReady) {
			continue // media overtaking the handshake's last record here
		}
		if err != nil {
			in.mu.Lock()
			in.mismatch++ // forged, replayed or cut: not what was sent
			in.mu.Unlock()
			continue
		}
		in.handle(b, arrival(oob[:oobn]))
	}
}

// arrival is the kernel's receive timestamp in oob, or now.
func arrival(oob []byte) time.Time {
	msgs, _ := unix.ParseSocketControlMessage(oob)
	for _, m := range msgs {
		if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
			sec := int64(binary.NativeEndian.Uint64(m.Data))
			nsec := int64(binary.NativeEndian.Uint64(m.Data[8:]))
			return time.Unix(sec, nsec)
		}
	}
	return time.Now()
}

func (in *Incoming) handle(b []byte, now time.Time) {
	if len(b) < 12 || b[0]>>6 != 2 { // STUN starts 0b00
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if b[1] == 200 {
		in.reports++
		return
	}
	if b[1] >= 192 && b[1] <= 223 {
		return
	}
	if in.ledger != nil {
		want, ok := in.ledger.m.Load(ledgerKey(b))
		if !ok || !bytes.Equal(want.([]byte), b) {
			in.mismatch++
			return
		}
	}
	ssrc := binary.BigEndian.Uint32(b[8:])
	if in.arrivals != nil {
		if key, ok := PayloadKey(b); ok {
			in.arrivals[key] = now
		}
	}
	st := in.streams[ssrc]
	if st == nil {
		// Room below the first number for packets reordered before it.
		st = &ssrcStats{seen: map[uint32]bool{}, clock: 90000, pt: b[1] & 0x7f, top: uint32(binary.BigEndian.Uint16(b[2:])) + 1<<16}
		if b[1]&0x7f == 111 {
			st.clock = 48000
		}
		in.streams[ssrc] = st
	}
	// RFC 3550 serial arithmetic: within half the space of the top.
	ext := uint32(int64(st.top) + int64(int16(binary.BigEndian.Uint16(b[2:])-uint16(st.top))))
	st.seen[ext], st.top = true, max(st.top, ext)
	// RFC 3550 A.8: transit time's variation, smoothed by 1/16.
	transit := float64(now.UnixNano())/1e9*st.clock - float64(binary.BigEndian.Uint32(b[4:]))
	if st.started {
		d := transit - st.lastTrans
		if d < 0 {
			d = -d
		}
		st.jitter += (d - st.jitter) / 16
	}
	st.lastTrans, st.started = transit, true
}

// Stats are the packets and jitter per SSRC, the RTP that did not match
// what the publisher sent, and the sender reports.
func (in *Incoming) Stats() (per map[uint32]Stat, mismatched, reports int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	per = map[uint32]Stat{}
	for ssrc, st := range in.streams {
		per[ssrc] = Stat{Packets: len(st.seen), Jitter: time.Duration(st.jitter / st.clock * 1e9), PayloadType: st.pt}
	}
	return per, in.mismatch, in.reports
}
