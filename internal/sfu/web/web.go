// Package web serves the SFU's meeting page and its WebSocket signaling:
// JSON messages between browsers and the controller.
package web

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/internal/sfu/controller"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
)

//go:embed meeting.html
var meetingPage []byte

// maxMessage bounds one signaling message: a description and a little more.
const maxMessage = signaling.MaxSDPSize + 1024

// keepalive: a signaling socket is pinged this often and closed (its
// participant leaves) when a pong takes longer than the same again.
const keepalive = 15 * time.Second

// request is what a browser sends.
type request struct {
	Type  string `json:"type"` // join, publish, unpublish, answer, mute
	Room  string `json:"room,omitempty"`
	Token string `json:"token,omitempty"` // join: the join token (access)
	Kind  string `json:"kind,omitempty"`  // mute: audio or video
	Muted bool   `json:"muted,omitempty"` // mute: off (true) or on again
	ID    string `json:"id,omitempty"`    // answer: the stream the answer is for
	// Source (publish, unpublish) is what the stream shows: camera (and
	// microphone; the default) or screen.
	Source string `json:"source,omitempty"`
	SDP    string `json:"sdp,omitempty"`
}

// Options of the signaling server.
type Options struct {
	// Gate admits joins (tokens, rates); every refusal is counted there.
	Gate *access.Gate
	// AllowedOrigins are the pages of other sites that may open
	// signaling: host patterns (path.Match, e.g. "*.example.com") or, with
	// a scheme, origin patterns ("https://meet.example.com"). A page
	// served here is always allowed.
	AllowedOrigins []string
	// JoinDeadline is how long a socket may stay without joining (0:
	// access.JoinDeadline).
	JoinDeadline time.Duration
}

// Handler serves the page at / and signaling at /ws.
func Handler(c *controller.Controller, o Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(meetingPage)
	})
	mux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) { accept(c, o, w, r) })
	return mux
}

// accept refuses a page of another site (a browser carries its
// visitor's address and cookies anywhere) and an address joining too
// often, before any WebSocket exists, then serves the socket.
func accept(c *controller.Controller, o Options, w http.ResponseWriter, r *http.Request) {
	if err := originAllowed(r, o.AllowedOrigins); err != nil {
		http.Error(w, o.Gate.Count(err).Error(), http.StatusForbidden)
		return
	}
	if err := o.Gate.Admit(remoteAddr(r), time.Now()); err != nil {
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: o.AllowedOrigins})
	if err != nil {
		return // Accept answered
	}
	ws.SetReadLimit(maxMessage)
	serve(c, o, ws)
}

// originAllowed is the library's own origin rule (same host, or a
// pattern), applied first so that a refusal is counted.
func originAllowed(r *http.Request, patterns []string) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil // not a browser: nothing of a visitor's to misuse
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return access.Refuse(access.Origin, "Origin %q is not a URL with a host", origin)
	}
	if strings.EqualFold(u.Host, r.Host) {
		return nil
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, _ := path.Match(strings.ToLower(p), strings.ToLower(target)); ok {
			return nil
		}
	}
	return access.Refuse(access.Origin, "a page of %s may not join here (--allowed-origin)", origin)
}

func remoteAddr(r *http.Request) netip.Addr {
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		a, _ := netip.ParseAddr(host)
		return a
	}
	return ap.Addr()
}

// serve runs one browser's session: a join first (within
// access.JoinDeadline), then publish and answers; the participant leaves
// when the socket closes or stops answering pings.
func serve(c *controller.Controller, o Options, ws *websocket.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer ws.CloseNow()
	var rejoin string // the join's token for a reload, sent with joined
	out := make(chan controller.Message, 64)
	written := make(chan struct{})
	go func() { write(ctx, ws, out); close(written) }()
	// The controller calls send with its lock held: queue, never block.
	send := func(m controller.Message) {
		if m.Type == "joined" {
			m.Token = rejoin
		}
		select {
		case out <- m:
		default:
			cancel() // a browser this far behind is gone: reader and writer end
		}
	}
	p, err := join(ctx, c, o, ws, send, &rejoin)
	if err != nil {
		send(controller.Message{Type: "error", Text: err.Error()})
		close(out) // the writer sends what is queued and closes
		<-written
		return
	}
	defer func() { _ = c.Leave(p) }()
	go ping(ctx, ws)
	for {
		var req request
		if err := wsjson.Read(ctx, ws, &req); err != nil {
			var ce websocket.CloseError
			if !errors.As(err, &ce) && !errors.Is(err, context.Canceled) {
				send(controller.Message{Type: "error", Text: "bad message: " + err.Error()})
			}
			return
		}
		if err := handle(c, p, req); err != nil {
			send(controller.Message{Type: "error", Text: err.Error()})
		}
	}
}

// join reads the session's first message, which must be a join within
// the deadline, and passes it through the gate into the controller. A
// refusal comes back as an error for the client (then the socket closes).
func join(ctx context.Context, c *controller.Controller, o Options, ws *websocket.Conn, send func(controller.Message), rejoin *string) (*controller.Participant, error) {
	gate, deadline := o.Gate, cmp.Or(o.JoinDeadline, access.JoinDeadline)
	first := make(chan error, 1)
	var req request
	go func() { first <- wsjson.Read(ctx, ws, &req) }()
	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil, gate.Count(access.Refuse(access.Idle, "no join within %v", deadline))
	case err := <-first:
		var syntax *json.SyntaxError
		var typ *json.UnmarshalTypeError
		switch {
		case errors.As(err, &syntax) || errors.As(err, &typ):
			return nil, gate.Count(access.Refuse(access.BadMessage, "bad message: %v", err))
		case err != nil:
			return nil, err // it left (or its connection broke) before joining: nothing refused
		}
	}
	if req.Type != "join" {
		return nil, gate.Count(access.Refuse(access.BadMessage, "join a room first"))
	}
	adm, err := gate.Join(req.Token, req.Room, time.Now())
	if err != nil {
		return nil, err
	}
	*rejoin = adm.Rejoin
	p, err := c.Join(adm.Grant, send)
	if err != nil {
		gate.Release(adm) // its token may join once a place frees
		return nil, gate.Count(err)
	}
	return p, nil
}

// write sends out's messages in order until out closes or ctx ends;
// after a refusal or a replacement it closes the socket as a policy
// violation, so the browser does not retry as after a network error.
func write(ctx context.Context, ws *websocket.Conn, out <-chan controller.Message) {
	for {
		select {
		case m, ok := <-out:
			if !ok || m.Type == "replaced" {
				if ok {
					_ = send(ctx, ws, m)
				}
				_ = ws.Close(websocket.StatusPolicyViolation, "")
				return
			}
			if send(ctx, ws, m) != nil {
				ws.CloseNow()
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func send(ctx context.Context, ws *websocket.Conn, m controller.Message) error {
	wctx, cancel := context.WithTimeout(ctx, keepalive)
	defer cancel()
	return wsjson.Write(wctx, ws, m)
}

// ping closes a socket whose browser has stopped answering: its
// participant leaves instead of holding its legs (and identity) for as
// long as TCP takes to notice.
func ping(ctx context.Context, ws *websocket.Conn) {
	t := time.NewTicker(keepalive)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, keepalive)
			err := ws.Ping(pctx)
			cancel()
			if err != nil {
				ws.CloseNow()
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

func handle(c *controller.Controller, p *controller.Participant, req request) error {
	switch req.Type {
	case "join":
		return errors.New("already joined")
	case "publish":
		return c.Publish(p, req.Source, req.SDP)
	case "unpublish":
		return c.Unpublish(p, req.Source)
	case "answer":
		return c.Answer(p, req.ID, req.SDP)
	case "mute":
		return c.Mute(p, req.Kind, req.Muted)
	}
	b, _ := json.Marshal(req.Type)
	return fmt.Errorf("unknown message type %s", b)
}
