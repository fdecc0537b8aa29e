package synth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	"github.com/pion/sdp/v3"

	"github.com/ebrtc/ebrtc/internal/netns"
)

// Net opens a participant's connections, in the namespace it lives in.
type Net struct {
	DialTCP   func(addr string) (net.Conn, error)
	ListenUDP func(laddr *net.UDPAddr) (*net.UDPConn, error)
}

// Local is the process's own network.
var Local = Net{
	DialTCP:   func(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, 2*time.Second) },
	ListenUDP: func(laddr *net.UDPAddr) (*net.UDPConn, error) { return net.ListenUDP("udp", laddr) },
}

// NetIn opens connections inside a network namespace (a socket stays in
// the namespace it was made in).
func NetIn(ns *netns.NS) Net {
	return Net{
		DialTCP: func(addr string) (c net.Conn, err error) {
			err = ns.Do(func() error { c, err = Local.DialTCP(addr); return err })
			return c, err
		},
		ListenUDP: func(laddr *net.UDPAddr) (c *net.UDPConn, err error) {
			err = ns.Do(func() error { c, err = Local.ListenUDP(laddr); return err })
			return c, err
		},
	}
}

// signalingSession is how a participant talks to its SFU: ebrtc sfu's WebSocket
// (session) or Janus's VideoRoom API (janusSession).
type signalingSession interface {
	// participantID is the participant's id in the room: what other
	// participants' streams from it are keyed by.
	participantID() string
	// publish offers our stream and returns the SFU's answer and what
	// waits, once our checks succeeded, until the SFU takes media.
	publish(offer string) (answer string, established func() error, err error)
	// candidateIP is the address our host candidates name, if the SFU
	// wants candidates (Janus); ebrtc sfu, ICE-lite, learns them from our
	// checks.
	candidateIP() netip.Addr
	// events are the streams offered to us and the SFU's complaints, until
	// signaling closes.
	events() <-chan signal
	close()
}

// signal is one event of signaling: another publisher's stream offered to
// us, or an error the SFU reported.
type signal struct {
	offer *streamOffer
	err   error
}

// streamOffer is the SFU's offer of another publisher's stream; answer
// accepts it, established waits (once our checks succeeded) until the SFU
// sends media.
type streamOffer struct {
	from, sdp   string
	answer      func(sdp string) error
	established func() error
}

// established is ebrtc sfu's: it forwards once a check bound us.
func established() error { return nil }

// message is ebrtc sfu's signaling, as a browser speaks it
// (internal/sfu/web).
type message struct {
	Type  string `json:"type"`
	Room  string `json:"room,omitempty"`
	Token string `json:"token,omitempty"`
	ID    string `json:"id,omitempty"`
	SDP   string `json:"sdp,omitempty"`
	Text  string `json:"text,omitempty"`
}

// session is one participant's signaling WebSocket to ebrtc sfu.
type session struct {
	ws      *websocket.Conn
	id      string
	in      chan message
	err     chan error
	answers chan message
	signals chan signal
}

// join opens signaling at server (host:port), over TLS with tlsConfig
// (wss) unless it is nil (ws), and joins the room, with token if the SFU
// wants one.
func join(n Net, server, room, token string, tlsConfig *tls.Config) (*session, error) {
	scheme := "ws://"
	if tlsConfig != nil {
		scheme = "wss://"
	}
	dial := func(context.Context, string, string) (net.Conn, error) { return n.DialTCP(server) }
	client := &http.Client{Transport: &http.Transport{DialContext: dial, TLSClientConfig: tlsConfig}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, scheme+server+"/ws", &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		return nil, fmt.Errorf("synth: signaling: %w", err)
	}
	ws.SetReadLimit(1 << 20)
	s := &session{ws: ws, in: make(chan message, 16), err: make(chan error, 1), answers: make(chan message, 1),
		signals: make(chan signal, 16)}
	go s.read()
	if err := s.send(message{Type: "join", Room: room, Token: token}); err != nil {
		ws.CloseNow()
		return nil, err
	}
	m, err := s.expect(context.Background(), "joined")
	if err != nil {
		ws.CloseNow()
		return nil, err
	}
	s.id = m.ID
	go s.dispatch()
	return s, nil
}

func (s *session) read() {
	for {
		var m message
		if err := wsjson.Read(context.Background(), s.ws, &m); err != nil {
			s.err <- err
			close(s.in)
			return
		}
		s.in <- m
	}
}

// dispatch hands answers to publish and offers and errors to events.
func (s *session) dispatch() {
	defer close(s.signals)
	for m := range s.in {
		switch m.Type {
		case "answer":
			select {
			case s.answers <- m:
			default:
				s.signals <- signal{err: errors.New("an answer nobody asked for")}
			}
		case "offer":
			s.signals <- signal{offer: &streamOffer{from: m.ID, sdp: m.SDP, answer: func(sdp string) error {
				return s.send(message{Type: "answer", ID: m.ID, SDP: sdp})
			}, established: established}}
		case "error":
			s.signals <- signal{err: fmt.Errorf("the SFU says: %s", m.Text)}
		}
	}
}

func (s *session) participantID() string   { return s.id }
func (s *session) candidateIP() netip.Addr { return netip.Addr{} }
func (s *session) events() <-chan signal   { return s.signals }

func (s *session) publish(offer string) (string, func() error, error) {
	if err := s.send(message{Type: "publish", SDP: offer}); err != nil {
		return "", nil, err
	}
	select {
	case m := <-s.answers:
		return m.SDP, established, nil
	case <-time.After(10 * time.Second):
		return "", nil, errors.New("synth: no answer to the publish within 10 s")
	}
}

func (s *session) send(m message) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return wsjson.Write(ctx, s.ws, m)
}

// expect waits for a message of this type (others are skipped), for 10 s.
func (s *session) expect(ctx context.Context, typ string) (message, error) {
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m, ok := <-s.in:
			if !ok {
				return m, fmt.Errorf("synth: signaling closed: %v", <-s.err)
			}
			if m.Type == "error" {
				return m, fmt.Errorf("synth: the SFU says: %s", m.Text)
			}
			if m.Type == typ {
				return m, nil
			}
		case <-timeout:
			return message{}, fmt.Errorf("synth: no %q message within 10 s", typ)
		case <-ctx.Done():
			return message{}, ctx.Err()
		}
	}
}

func (s *session) close() { s.ws.Close(websocket.StatusNormalClosure, "leaving") }

// remoteICE is the SFU's side of a connection: credentials, the host
// candidates of the family wanted, and the one whose check succeeded
// (connect sets it; media goes there).
type remoteICE struct {
	Ufrag, Pwd string
	Candidates []netip.AddrPort
	Candidate  netip.AddrPort
}

func iceOf(desc string, v4 bool) (remoteICE, error) {
	var sd sdp.SessionDescription
	if err := sd.UnmarshalString(desc); err != nil {
		return remoteICE{}, fmt.Errorf("synth: the SFU's description: %w", err)
	}
	if len(sd.MediaDescriptions) == 0 {
		return remoteICE{}, errors.New("synth: the SFU's description has no media")
	}
	md := sd.MediaDescriptions[0]
	var r remoteICE
	r.Ufrag, _ = md.Attribute("ice-ufrag")
	r.Pwd, _ = md.Attribute("ice-pwd")
	for _, a := range md.Attributes {
		if a.Key != "candidate" {
			continue
		}
		var f [8]string
		if _, err := fmt.Sscan(a.Value, &f[0], &f[1], &f[2], &f[3], &f[4], &f[5], &f[6], &f[7]); err != nil {
			continue
		}
		addr, err := netip.ParseAddr(f[4])
		var port uint16
		if _, perr := fmt.Sscan(f[5], &port); err == nil && perr == nil && addr.Is4() == v4 {
			r.Candidates = append(r.Candidates, netip.AddrPortFrom(addr, port))
		}
	}
	if r.Ufrag == "" || r.Pwd == "" || len(r.Candidates) == 0 {
		return r, errors.New("synth: the SFU's description lacks ICE credentials or a candidate of our family")
	}
	return r, nil
}
