package web

import (
	"errors"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/net/websocket"

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
func (nopPlane) Arrivals(netip.AddrPort) (*dataplane.ArrivalLog, error) {
	return nil, errors.New("none")
}

// The page is served; signaling answers out-of-order and unknown messages
// with an error naming the problem, and a join with the participant's id.
func TestSignaling(t *testing.T) {
	legs, err := leg.NewTable(leg.Config{Plane: nopPlane{}, Routes: leg.NewRoutes()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := controller.New(controller.Config{Media: []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:40000")},
		ICE: agent.NewICE(agent.ICEConfig{}), Legs: legs})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(Handler(c))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("page: %v %v", resp, err)
	}
	resp.Body.Close()
	ws, err := websocket.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/ws", "", srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	exchange := func(req request) controller.Message {
		t.Helper()
		if err := websocket.JSON.Send(ws, req); err != nil {
			t.Fatal(err)
		}
		var m controller.Message
		if err := websocket.JSON.Receive(ws, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := exchange(request{Type: "publish", SDP: "x"}); m.Type != "error" || !strings.Contains(m.Text, "join") {
		t.Errorf("publish before join: %+v", m)
	}
	if m := exchange(request{Type: "join", Room: "bad room"}); m.Type != "error" || !strings.Contains(m.Text, "room name") {
		t.Errorf("bad room: %+v", m)
	}
	if m := exchange(request{Type: "join", Room: "r"}); m.Type != "joined" || m.ID == "" || m.Media != "plain" {
		t.Errorf("join: %+v", m)
	}
	if m := exchange(request{Type: "dance"}); m.Type != "error" || !strings.Contains(m.Text, "unknown message type") {
		t.Errorf("unknown type: %+v", m)
	}
	if m := exchange(request{Type: "publish", SDP: "garbage"}); m.Type != "error" {
		t.Errorf("garbage offer: %+v", m)
	}
}
