package web

import (
	"context"
	"encoding/base64"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/ebrtc/ebrtc/internal/sfu/access"

	"github.com/ebrtc/ebrtc/internal/sfu/agent"
	"github.com/ebrtc/ebrtc/internal/sfu/controller"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/leg"
)

type nopPlane struct{}

func (nopPlane) SetStream(netip.AddrPort, []dataplane.Source, []dataplane.Receiver) error { return nil }
func (nopPlane) RemoveStream(netip.AddrPort) error                                        { return nil }
func (nopPlane) StreamStats(netip.AddrPort) (dataplane.StreamStats, error) {
	return dataplane.StreamStats{}, nil
}
func (nopPlane) Outcomes() (map[dataplane.Outcome]dataplane.Counter, error) { return nil, nil }
func (nopPlane) Close() error                                               { return nil }
func (nopPlane) Layers(netip.AddrPort) (dataplane.Layers, error)            { return dataplane.Layers{}, nil }
func (nopPlane) Packet(netip.AddrPort, uint16) ([]byte, bool)               { return nil, false }
func (nopPlane) Leg(_, _ netip.AddrPort) (dataplane.Leg, error)             { return nil, errors.New("no legs") }
func (nopPlane) Send([]byte, netip.AddrPort, netip.AddrPort) error          { return nil }
func (nopPlane) AudioLevels(netip.AddrPort) (dataplane.AudioLevels, error) {
	return dataplane.AudioLevels{}, nil
}
func (nopPlane) Arrivals(netip.AddrPort) (*dataplane.ArrivalLog, error) {
	return nil, errors.New("none")
}

// server is the signaling server over a controller with a no-op data
// plane, and its gate.
func server(t *testing.T, acfg access.Config, o Options) (*httptest.Server, *access.Gate) {
	t.Helper()
	legs, err := leg.NewTable(leg.Config{Plane: nopPlane{}, Routes: leg.NewRoutes()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(controller.Config{Media: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:40000")},
		ICE: agent.NewICE(agent.ICEConfig{}), Legs: legs, MaxParticipants: 3})
	if err != nil {
		t.Fatal(err)
	}
	o.Gate, err = access.New(acfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(c, o))
	t.Cleanup(srv.Close)
	return srv, o.Gate
}

// client is one signaling socket.
type client struct {
	t  *testing.T
	ws *websocket.Conn
}

func dial(t *testing.T, srv *httptest.Server, origin string) (*client, *http.Response, error) {
	t.Helper()
	h := http.Header{}
	if origin != "" {
		h.Set("Origin", origin)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		return nil, resp, err
	}
	t.Cleanup(func() { ws.CloseNow() })
	return &client{t: t, ws: ws}, resp, nil
}

func mustDial(t *testing.T, srv *httptest.Server) *client {
	t.Helper()
	c, _, err := dial(t, srv, "")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (c *client) send(req request) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := wsjson.Write(ctx, c.ws, req); err != nil {
		c.t.Fatal(err)
	}
}

// next is the next message; closed, if the server closed the socket
// instead, says how.
func (c *client) next() (m controller.Message, closed websocket.StatusCode) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := wsjson.Read(ctx, c.ws, &m); err != nil {
		return m, websocket.CloseStatus(err)
	}
	return m, -1
}

func (c *client) exchange(req request) controller.Message {
	c.t.Helper()
	c.send(req)
	m, closed := c.next()
	if closed != -1 {
		c.t.Fatalf("%+v: the socket closed (%v)", req, closed)
	}
	return m
}

// The page is served; signaling answers out-of-order and unknown messages
// with an error naming the problem, and a join with the participant's id.
func TestSignaling(t *testing.T) {
	srv, _ := server(t, access.Config{Open: true}, Options{})
	resp, err := srv.Client().Get(srv.URL + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("page: %v %v", resp, err)
	}
	resp.Body.Close()
	c := mustDial(t, srv)
	if m := c.exchange(request{Type: "join", Room: "r"}); m.Type != "joined" || m.ID == "" || m.Media != "plain" || m.Token != "" {
		t.Errorf("join: %+v", m)
	}
	if m := c.exchange(request{Type: "dance"}); m.Type != "error" || !strings.Contains(m.Text, "unknown message type") {
		t.Errorf("unknown type: %+v", m)
	}
	if m := c.exchange(request{Type: "publish", SDP: "garbage"}); m.Type != "error" {
		t.Errorf("garbage offer: %+v", m)
	}
	if m := c.exchange(request{Type: "join", Room: "r"}); m.Type != "error" || !strings.Contains(m.Text, "already joined") {
		t.Errorf("a second join: %+v", m)
	}
	// Before a join, anything else ends the session; so does a bad room.
	for _, req := range []request{{Type: "publish", SDP: "x"}, {Type: "join", Room: "bad room"}} {
		c := mustDial(t, srv)
		if m := c.exchange(req); m.Type != "error" {
			t.Errorf("%+v: %+v", req, m)
		}
		if _, closed := c.next(); closed != websocket.StatusPolicyViolation {
			t.Errorf("%+v: the socket stays open (%v)", req, closed)
		}
	}
}

var secret = []byte("0123456789abcdef0123456789abcdef")

func mint(t *testing.T, key []byte, g access.Grant, ttl time.Duration) string {
	t.Helper()
	tok, err := access.Mint(key, g, time.Now(), ttl)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// With a token secret, only a valid token's first use joins, into its
// room, as what it grants; every refusal closes the socket and is counted
// by its reason; the join's rejoin token joins once more, replacing the
// participant it was given to.
func TestJoinTokens(t *testing.T) {
	srv, gate := server(t, access.Config{Secret: secret}, Options{})
	alice := access.Grant{Room: "r", Identity: "alice", Name: "Alice", Publish: true}
	good := mint(t, secret, alice, time.Minute)
	c := mustDial(t, srv)
	joined := c.exchange(request{Type: "join", Token: good})
	if joined.Type != "joined" || joined.Name != "Alice" || joined.Token == "" || joined.Token == good {
		t.Fatalf("join: %+v", joined)
	}
	header, payload, _ := strings.Cut(good, ".")
	payload, _, _ = strings.Cut(payload, ".")
	expired, err := access.Mint(secret, alice, time.Now().Add(-2*time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	none := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none"}`)) + "." + payload + "."
	refusals := []struct {
		name, token, room string
		reason            access.Reason
	}{
		{"no token", "", "r", access.NoToken},
		{"garbage", "garbage", "", access.Malformed},
		{"forged", mint(t, []byte("another secret, 32 bytes or more!"), alice, time.Minute), "", access.Signature},
		{"alg none", none, "", access.Signature},
		{"claims edited", header + "." + base64.RawURLEncoding.EncodeToString([]byte(`{"room":"r","sub":"mallory","publish":true,"exp":9999999999,"jti":"x"}`)) + "." + strings.Split(good, ".")[2], "", access.Signature},
		{"expired", expired, "", access.Expired},
		{"wrong room", mint(t, secret, alice, time.Minute), "other", access.WrongRoom},
		{"replayed", good, "", access.Replayed},
	}
	for _, r := range refusals {
		c := mustDial(t, srv)
		m := c.exchange(request{Type: "join", Token: r.token, Room: r.room})
		if m.Type != "error" || !strings.Contains(m.Text, "("+string(r.reason)+")") {
			t.Errorf("%s: %+v, want a refusal (%s)", r.name, m, r.reason)
		}
		if _, closed := c.next(); closed != websocket.StatusPolicyViolation {
			t.Errorf("%s: the socket stays open (%v)", r.name, closed)
		}
	}
	// A viewer joins and may not publish.
	v := mustDial(t, srv)
	if m := v.exchange(request{Type: "join", Token: mint(t, secret, access.Grant{Room: "r", Identity: "viewer"}, time.Minute)}); m.Type != "joined" {
		t.Fatalf("viewer: %+v", m)
	}
	if m := v.exchange(request{Type: "publish", SDP: "v=0"}); m.Type != "error" {
		t.Errorf("a viewer's publish: %+v", m)
	}
	// The rejoin token joins (a reload); the old session is told and closed.
	again := mustDial(t, srv)
	if m := again.exchange(request{Type: "join", Token: joined.Token}); m.Type != "joined" || m.Name != "Alice" {
		t.Fatalf("rejoin: %+v", m)
	}
	if m, _ := c.next(); m.Type != "replaced" {
		t.Errorf("the replaced session got %+v", m)
	}
	if _, closed := c.next(); closed != websocket.StatusPolicyViolation {
		t.Errorf("the replaced session stays open (%v)", closed)
	}
	// The room holds 3: a fourth is refused.
	third := mustDial(t, srv)
	if m := third.exchange(request{Type: "join", Token: mint(t, secret, access.Grant{Room: "r", Identity: "carol"}, time.Minute)}); m.Type != "joined" {
		t.Fatalf("third: %+v", m)
	}
	dave := mint(t, secret, access.Grant{Room: "r", Identity: "dave"}, time.Minute)
	fourth := mustDial(t, srv)
	if m := fourth.exchange(request{Type: "join", Token: dave}); !strings.Contains(m.Text, "(room_full)") {
		t.Errorf("fourth: %+v", m)
	}
	// Once a place frees, the refused token joins (the room refused it,
	// not the gate: it was not used up).
	third.ws.Close(websocket.StatusNormalClosure, "")
	var m controller.Message
	fullAgain := 0 // tries before the server saw the third leave
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m = mustDial(t, srv).exchange(request{Type: "join", Token: dave}); !strings.Contains(m.Text, "(room_full)") {
			break
		}
		fullAgain++
	}
	if m.Type != "joined" {
		t.Errorf("the refused token once a place freed: %+v", m)
	}
	// A rejoin token joins once too.
	if m := mustDial(t, srv).exchange(request{Type: "join", Token: joined.Token}); !strings.Contains(m.Text, "(replayed)") {
		t.Errorf("the rejoin token a second time: %+v", m)
	}
	want := map[access.Reason]uint64{access.RoomFull: 1 + uint64(fullAgain), access.Replayed: 1}
	for _, r := range refusals {
		want[r.reason]++
	}
	if got := gate.Refusals(); !maps.Equal(got, want) {
		t.Errorf("refusals %v, want %v", got, want)
	}
}

// A page of another site cannot open signaling unless allowed; a page of
// this one and a client without an Origin (not a browser) can. One
// address joining faster than its bucket is refused before a WebSocket
// exists; a socket that never joins is closed.
func TestOriginRateAndIdle(t *testing.T) {
	srv, gate := server(t, access.Config{Open: true, JoinRate: 0.001, JoinBurst: 5},
		Options{AllowedOrigins: []string{"*.example.com", "https://app.test:8443"}, JoinDeadline: 200 * time.Millisecond})
	host := strings.TrimPrefix(srv.URL, "http://")
	for _, o := range []string{"http://" + host, "https://meet.example.com", "https://app.test:8443"} {
		c, _, err := dial(t, srv, o)
		if err != nil {
			t.Fatalf("origin %s: %v", o, err)
		}
		c.ws.Close(websocket.StatusNormalClosure, "") // gone before joining: no refusal
	}
	// A host pattern matches the origin's host with its port: a port
	// needs its own pattern; an origin pattern, its scheme too.
	for _, o := range []string{"https://evil.test", "https://meet.example.com:8443", "http://app.test:8443"} {
		if _, resp, err := dial(t, srv, o); err == nil || resp == nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("origin %s: %v %v", o, resp, err)
		}
	}
	idle := mustDial(t, srv) // the fourth join from this address
	if m, _ := idle.next(); !strings.Contains(m.Text, "(idle)") {
		t.Errorf("idle: %+v", m)
	}
	if _, closed := idle.next(); closed != websocket.StatusPolicyViolation {
		t.Errorf("idle: the socket closed with %v", closed)
	}
	mustDial(t, srv).ws.Close(websocket.StatusNormalClosure, "") // the fifth
	if _, resp, err := dial(t, srv, ""); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the sixth join from one address: %v %v", resp, err)
	}
	want := map[access.Reason]uint64{access.Origin: 3, access.Idle: 1, access.Rate: 1}
	if got := gate.Refusals(); !maps.Equal(got, want) {
		t.Errorf("refusals %v, want %v", got, want)
	}
}
