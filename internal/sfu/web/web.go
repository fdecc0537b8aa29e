// Package web serves the SFU's meeting page and its WebSocket signaling:
// JSON messages between browsers and the controller.
package web

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"golang.org/x/net/websocket"

	"github.com/ebrtc/ebrtc/internal/sfu/controller"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
)

//go:embed meeting.html
var meetingPage []byte

// maxMessage bounds one signaling message: a description and a little more.
const maxMessage = signaling.MaxSDPSize + 1024

// request is what a browser sends.
type request struct {
	Type string `json:"type"` // join, publish, answer
	Room string `json:"room,omitempty"`
	ID   string `json:"id,omitempty"` // answer: the publisher the answer is for
	SDP  string `json:"sdp,omitempty"`
}

// Handler serves the page at / and signaling at /ws.
func Handler(c *controller.Controller) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(meetingPage)
	})
	mux.Handle("/ws", websocket.Server{Handler: func(ws *websocket.Conn) { serve(c, ws) }})
	return mux
}

// serve runs one browser's session: a join first, then publish and
// answers; the participant leaves when the socket closes.
func serve(c *controller.Controller, ws *websocket.Conn) {
	ws.MaxPayloadBytes = maxMessage
	out := make(chan controller.Message, 64)
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case m := <-out:
				if websocket.JSON.Send(ws, m) != nil {
					ws.Close()
					return
				}
			case <-done:
				// What was queued before the end (a last error) still goes.
				for {
					select {
					case m := <-out:
						if websocket.JSON.Send(ws, m) != nil {
							return
						}
					default:
						return
					}
				}
			}
		}
	}()
	// The controller calls send with its lock held: queue, never block.
	send := func(m controller.Message) {
		select {
		case out <- m:
		default:
			ws.Close() // a browser this far behind is gone
		}
	}
	var p *controller.Participant
	defer func() {
		if p != nil {
			_ = c.Leave(p)
		}
	}()
	for {
		var req request
		if err := websocket.JSON.Receive(ws, &req); err != nil {
			if !errors.Is(err, io.EOF) {
				send(controller.Message{Type: "error", Text: "bad message: " + err.Error()})
			}
			return
		}
		if err := handle(c, &p, req, send); err != nil {
			send(controller.Message{Type: "error", Text: err.Error()})
		}
	}
}

func handle(c *controller.Controller, p **controller.Participant, req request, send func(controller.Message)) error {
	switch {
	case req.Type == "join" && *p == nil:
		joined, err := c.Join(req.Room, send)
		*p = joined
		return err
	case *p == nil:
		return errors.New("join a room first")
	case req.Type == "publish":
		return c.Publish(*p, req.SDP)
	case req.Type == "answer":
		return c.Answer(*p, req.ID, req.SDP)
	}
	b, _ := json.Marshal(req.Type)
	return fmt.Errorf("unknown message type %s", b)
}
