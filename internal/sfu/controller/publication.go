package controller

import (
	"github.com/ebrtc/ebrtc/internal/sfu/leg"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
)

// Sources a participant publishes, each on a send-only connection of its
// own: the data plane's key-frame gate, layers and numbers, and each
// receiver's rate adaptation, are per stream (a screen is no camera's
// layer), and every receiver gets a receive-only connection per stream,
// as per publisher until now (the peer-to-peer illusion, docs/sfu.md).
const (
	Camera = "camera" // its camera and microphone
	Screen = "screen" // a screen (or window, or tab) it shares
)

// publication is one stream a participant publishes: its description,
// its send-only connection, and, once that is bound, its stream in the
// legs and the data plane.
type publication struct {
	id      string // the stream's id (streamID)
	source  string // Camera or Screen
	owner   *Participant
	publish *signaling.Publish
	conn    *conn
	sender  *leg.Sender
}

// streamID names a participant's stream of a source: its camera's by the
// participant's id (what pages knew before screens), its screen's with
// ":screen" (a participant id never holds a ':').
func streamID(participant, source string) string {
	if source == Camera {
		return participant
	}
	return participant + ":" + source
}

// sends says whether cn is the send-only connection of its stream.
func (cn *conn) sends() bool { return cn.stream != nil && cn.stream.conn == cn }

// closeSender ends the stream's data plane entry and legs (its connection
// is unbound, or the stream ends).
func (pb *publication) closeSender() error {
	if pb.sender == nil {
		return nil
	}
	err := pb.sender.Close()
	pb.sender = nil
	return err
}

// unpublish ends pb (the lock held): its stream and connection, every
// receiver's connection for it (told: left).
func (c *Controller) unpublish(pb *publication) error {
	err := pb.closeSender()
	c.dropConn(pb.conn)
	p := pb.owner
	delete(p.pubs, pb.source)
	for _, other := range p.room.parts {
		if cn := other.recv[pb.id]; cn != nil {
			c.dropConn(cn)
			delete(other.recv, pb.id)
			if other != p {
				other.send(Message{Type: "left", ID: pb.id})
			}
		}
	}
	return err
}
