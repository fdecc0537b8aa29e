package synth

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// janusSession is a participant's signaling with Janus's VideoRoom plugin
// over Janus's HTTP API (RESTful requests, events by long poll): a
// publisher handle, and a subscriber handle per other publisher, so that
// each remote stream has a PeerConnection of its own as with ebrtc sfu.
// Janus is configured with string room and participant ids
// (testbed.StartJanus).
type janusSession struct {
	client *http.Client
	base   string // http://host:port/janus/<session id>
	room   string
	pub    uint64 // the publisher handle
	id     string // our publisher id in the room
	local  netip.Addr

	mu         sync.Mutex
	waiting    map[string]chan janusMessage // async requests, by transaction
	up         map[uint64]chan struct{}     // closed on the handle's webrtcup
	subscribed map[string]bool              // publisher ids

	signals   chan signal
	done      chan struct{}
	stop      context.CancelFunc
	workers   sync.WaitGroup // the poll loop and subscriptions
	closeOnce sync.Once
}

// janusMessage is any message of Janus's API.
type janusMessage struct {
	Janus       string `json:"janus"`
	Transaction string `json:"transaction,omitempty"`
	Sender      uint64 `json:"sender,omitempty"`
	Data        struct {
		ID uint64 `json:"id"`
	} `json:"data"`
	Error *struct {
		Code   int    `json:"code"`
		Reason string `json:"reason"`
	} `json:"error,omitempty"`
	PluginData struct {
		Data videoRoomData `json:"data"`
	} `json:"plugindata"`
	JSEP *janusJSEP `json:"jsep,omitempty"`
}

type janusJSEP struct {
	Type    string `json:"type"`
	SDP     string `json:"sdp"`
	Trickle bool   `json:"trickle"`
}

// videoRoomData is the VideoRoom plugin's part of a message.
type videoRoomData struct {
	VideoRoom  string `json:"videoroom"`
	ID         string `json:"id"`
	Publishers []struct {
		ID string `json:"id"`
	} `json:"publishers"`
	ErrorCode int    `json:"error_code"`
	Error     string `json:"error"`
}

// janusRoomExists is the VideoRoom's error code for creating a room that exists.
const janusRoomExists = 427

// joinJanus creates a session, the room if it is new, and joins it as a
// publisher (which is also how a VideoRoom participant learns of others).
func joinJanus(n Net, server, room string) (*janusSession, error) {
	client := &http.Client{Timeout: 45 * time.Second, Transport: &http.Transport{
		DialContext:         func(_ context.Context, _, addr string) (net.Conn, error) { return n.DialTCP(addr) },
		MaxIdleConnsPerHost: 4,
	}}
	s := &janusSession{client: client, room: room, waiting: map[string]chan janusMessage{}, up: map[uint64]chan struct{}{},
		subscribed: map[string]bool{}, signals: make(chan signal, 16), done: make(chan struct{})}
	// Janus wants our candidates: the address we reach it from.
	probe, err := n.DialTCP(server)
	if err != nil {
		return nil, fmt.Errorf("synth: janus: %w", err)
	}
	s.local = probe.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	probe.Close()
	created, err := s.post(context.Background(), "http://"+server+"/janus", map[string]any{"janus": "create"})
	if err != nil {
		client.CloseIdleConnections()
		return nil, fmt.Errorf("synth: janus session: %w", err)
	}
	s.base = fmt.Sprintf("http://%s/janus/%d", server, created.Data.ID)
	ctx, stop := context.WithCancel(context.Background())
	s.stop = stop
	s.workers.Add(1)
	go s.poll(ctx)
	fail := func(err error) (*janusSession, error) {
		s.close()
		return nil, err
	}
	pub, err := s.attach()
	if err != nil {
		return fail(err)
	}
	s.mu.Lock() // the poll loop reads it
	s.pub = pub
	s.mu.Unlock()
	create := map[string]any{"request": "create", "room": room, "publishers": 1000, "videocodec": "av1", "audiocodec": "opus",
		"bitrate": 0, "fir_freq": 0, "notify_joining": false}
	if _, err := s.message(s.pub, create, nil, ""); err != nil && !isJanusError(err, janusRoomExists) {
		return fail(fmt.Errorf("synth: janus room %q: %w", room, err))
	}
	joined, err := s.message(s.pub, map[string]any{"request": "join", "ptype": "publisher", "room": room}, nil, "joined")
	if err != nil {
		return fail(fmt.Errorf("synth: janus join %q: %w", room, err))
	}
	s.mu.Lock()
	s.id = joined.PluginData.Data.ID
	s.mu.Unlock()
	s.subscribeAll(joined.PluginData.Data)
	return s, nil
}

func (s *janusSession) participantID() string   { return s.id }
func (s *janusSession) candidateIP() netip.Addr { return s.local }
func (s *janusSession) events() <-chan signal   { return s.signals }

// publish sends our offer to the publisher handle; Janus answers in the
// "configured" event.
func (s *janusSession) publish(offer string) (string, func() error, error) {
	m, err := s.message(s.pub, map[string]any{"request": "publish"}, &janusJSEP{Type: "offer", SDP: offer}, "event")
	if err != nil {
		return "", nil, fmt.Errorf("synth: janus publish: %w", err)
	}
	if m.JSEP == nil {
		return "", nil, errors.New("synth: janus published without an answer")
	}
	return m.JSEP.SDP, s.established(s.pub), nil
}

// established waits for Janus's webrtcup on handle h: its ICE agent checks
// back, and media flows only once that succeeded.
func (s *janusSession) established(h uint64) func() error {
	return func() error {
		s.mu.Lock()
		up := s.up[h]
		s.mu.Unlock()
		select {
		case <-up:
			return nil
		case <-time.After(10 * time.Second):
			return errors.New("janus: no webrtcup within 10 s")
		case <-s.done:
			return errors.New("the session closed")
		}
	}
}

// subscribeAll subscribes to every publisher listed in d not yet
// subscribed to (other than us), each on a handle of its own.
func (s *janusSession) subscribeAll(d videoRoomData) {
	for _, p := range d.Publishers {
		s.mu.Lock()
		fresh := p.ID != s.id && !s.subscribed[p.ID]
		s.subscribed[p.ID] = true
		s.mu.Unlock()
		if !fresh {
			continue
		}
		s.workers.Add(1)
		go func() {
			defer s.workers.Done()
			if err := s.subscribe(p.ID); err != nil {
				s.emit(signal{err: fmt.Errorf("subscribe to %s: %w", p.ID, err)})
			}
		}()
	}
}

// subscribe asks for the publisher's stream and hands Janus's offer on;
// answering it starts the stream.
func (s *janusSession) subscribe(feed string) error {
	h, err := s.attach()
	if err != nil {
		return err
	}
	join := map[string]any{"request": "join", "ptype": "subscriber", "room": s.room, "streams": []map[string]any{{"feed": feed}}}
	m, err := s.message(h, join, nil, "attached")
	if err != nil {
		return err
	}
	if m.JSEP == nil {
		return errors.New("janus attached a subscriber without an offer")
	}
	s.emit(signal{offer: &streamOffer{from: feed, sdp: m.JSEP.SDP, answer: func(sdp string) error {
		_, err := s.message(h, map[string]any{"request": "start"}, &janusJSEP{Type: "answer", SDP: sdp}, "event")
		return err
	}, established: s.established(h)}})
	return nil
}

// emit hands a signal to the participant unless the session closed.
func (s *janusSession) emit(sig signal) {
	select {
	case s.signals <- sig:
	case <-s.done:
	}
}

// attach attaches a VideoRoom handle to the session.
func (s *janusSession) attach() (uint64, error) {
	m, err := s.post(context.Background(), s.base, map[string]any{"janus": "attach", "plugin": "janus.plugin.videoroom"})
	if err != nil {
		return 0, fmt.Errorf("janus attach: %w", err)
	}
	s.mu.Lock()
	s.up[m.Data.ID] = make(chan struct{})
	s.mu.Unlock()
	return m.Data.ID, nil
}

// message sends a request to the VideoRoom on handle h. A synchronous
// request's answer comes back at once; an asynchronous one's (Janus acks
// it) comes as an event, which must carry the videoroom type want.
func (s *janusSession) message(h uint64, body map[string]any, jsep *janusJSEP, want string) (janusMessage, error) {
	tx := rand.Text()
	events := make(chan janusMessage, 1)
	s.mu.Lock()
	s.waiting[tx] = events
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.waiting, tx)
		s.mu.Unlock()
	}()
	req := map[string]any{"janus": "message", "transaction": tx, "body": body}
	if jsep != nil {
		req["jsep"] = jsep
	}
	m, err := s.post(context.Background(), fmt.Sprintf("%s/%d", s.base, h), req)
	if err != nil {
		return m, err
	}
	if m.Janus == "ack" {
		select {
		case m = <-events:
		case <-time.After(10 * time.Second):
			return m, fmt.Errorf("no answer to %v within 10 s", body["request"])
		case <-s.done:
			return m, errors.New("the session closed")
		}
	}
	d := m.PluginData.Data
	if d.ErrorCode != 0 {
		return m, &janusError{code: d.ErrorCode, reason: d.Error}
	}
	if want != "" && d.VideoRoom != want {
		return m, fmt.Errorf("janus answered %v with %q, want %q", body["request"], d.VideoRoom, want)
	}
	return m, nil
}

type janusError struct {
	code   int
	reason string
}

func (e *janusError) Error() string { return fmt.Sprintf("janus error %d: %s", e.code, e.reason) }

func isJanusError(err error, code int) bool {
	var je *janusError
	return errors.As(err, &je) && je.code == code
}

// post sends one API request (a transaction id added if it has none) and
// returns Janus's immediate answer.
func (s *janusSession) post(ctx context.Context, url string, req map[string]any) (janusMessage, error) {
	if _, ok := req["transaction"]; !ok {
		req["transaction"] = rand.Text()
	}
	b, err := json.Marshal(req)
	if err != nil {
		return janusMessage{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return janusMessage{}, err
	}
	resp, err := s.client.Do(hr)
	if err != nil {
		return janusMessage{}, err
	}
	defer resp.Body.Close()
	var m janusMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&m); err != nil {
		return m, fmt.Errorf("janus answer: %w", err)
	}
	if m.Janus == "error" && m.Error != nil {
		return m, &janusError{code: m.Error.Code, reason: m.Error.Reason}
	}
	return m, nil
}

// poll long-polls the session's events (which also keeps it alive) and
// routes them: answers to waiting requests, news of publishers to
// subscriptions.
func (s *janusSession) poll(ctx context.Context) {
	defer s.workers.Done()
	for ctx.Err() == nil {
		hr, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"?maxev=16", nil)
		if err != nil {
			return
		}
		resp, err := s.client.Do(hr)
		if err != nil {
			if ctx.Err() == nil {
				s.emit(signal{err: fmt.Errorf("janus events: %w", err)})
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		var batch []janusMessage
		err = json.NewDecoder(io.LimitReader(resp.Body, 4<<20)).Decode(&batch)
		resp.Body.Close()
		if err != nil {
			continue // a keepalive, or a single message of an old Janus: nothing we wait for
		}
		for _, m := range batch {
			s.route(m)
		}
	}
}

func (s *janusSession) route(m janusMessage) {
	s.mu.Lock()
	waiter, pub := s.waiting[m.Transaction], s.pub
	if up := s.up[m.Sender]; m.Janus == "webrtcup" && up != nil {
		select {
		case <-up:
		default:
			close(up)
		}
	}
	s.mu.Unlock()
	if waiter != nil && m.Janus == "event" {
		select {
		case waiter <- m:
		default:
		}
		return
	}
	if m.Janus == "event" && m.Sender == pub && len(m.PluginData.Data.Publishers) > 0 {
		s.subscribeAll(m.PluginData.Data)
	}
}

// close destroys the Janus session (every handle with it) and ends the
// poll loop and subscriptions; then the events end.
func (s *janusSession) close() {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			s.stop()
		}
		if s.base != "" {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, _ = s.post(ctx, s.base, map[string]any{"janus": "destroy"})
			cancel()
		}
		close(s.done)
		go func() {
			s.workers.Wait()
			close(s.signals)
			s.client.CloseIdleConnections()
		}()
	})
}
