// Package admin is the admin endpoint every ebrtc server can serve (its
// admin-listen): a JSON snapshot of what it relays, at GET /v1/status over a
// unix socket or loopback TCP, which `ebrtc top` reads and renders. It names
// users and addresses and has no login, so it never listens on a routable
// address.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/offload"
)

// Status is a server's snapshot. Counters are totals since the server (or,
// for the fast path, its pinned maps) started; top turns two snapshots into
// rates.
type Status struct {
	Server      string            `json:"server"` // turn, offload or sfu
	Pid         int               `json:"pid"`
	Time        time.Time         `json:"time"`
	Interfaces  []Interface       `json:"interfaces,omitempty"`
	Fast        Flow              `json:"fast"`
	Slow        Flow              `json:"slow"`
	SlowReasons map[string]uint64 `json:"slow_reasons,omitempty"` // packets the fast path handed to the kernel, by reason
	Users       []User            `json:"users,omitempty"`
	Allocations []Allocation      `json:"allocations,omitempty"`
	Rooms       []Room            `json:"rooms,omitempty"`
	Legs        []Leg             `json:"legs,omitempty"` // SFU: each sender's stream to each receiver
}

// Interface is where the fast path runs, and why so.
type Interface struct {
	Name   string `json:"name"`
	Hooks  string `json:"hooks"`
	Reason string `json:"reason"`
}

// Counter counts packets and bytes.
type Counter struct {
	Packets uint64 `json:"packets"`
	Bytes   uint64 `json:"bytes"`
}

// Add returns c + d.
func (c Counter) Add(d Counter) Counter { return Counter{c.Packets + d.Packets, c.Bytes + d.Bytes} }

// Flow is relayed traffic in both directions.
type Flow struct {
	ToPeer   Counter `json:"to_peer"`
	ToClient Counter `json:"to_client"`
}

// Add returns f + g.
func (f Flow) Add(g Flow) Flow { return Flow{f.ToPeer.Add(g.ToPeer), f.ToClient.Add(g.ToClient)} }

// User is a user's traffic, over the allocations it holds and has held.
type User struct {
	Name        string `json:"name"`
	Allocations int    `json:"allocations"`
	Fast        Flow   `json:"fast"`
	Slow        Flow   `json:"slow"`
}

// Allocation is a TURN allocation with its channels.
type Allocation struct {
	Client   netip.AddrPort `json:"client"`
	Relay    netip.AddrPort `json:"relay"`
	User     string         `json:"user,omitempty"`
	Expires  time.Time      `json:"expires"`
	Fast     Flow           `json:"fast"`
	Slow     Flow           `json:"slow"`
	Channels []Channel      `json:"channels,omitempty"`
}

// Channel is a channel binding; Fast is what the fast path relayed on it.
type Channel struct {
	Number  uint16         `json:"number"`
	Peer    netip.AddrPort `json:"peer"`
	Offload bool           `json:"offload"` // installed in the fast path
	Fast    Flow           `json:"fast"`
}

// Room is an SFU room.
type Room struct {
	Name         string        `json:"name"`
	Participants []Participant `json:"participants"`
}

// Participant is one member of a room: what it publishes and receives.
type Participant struct {
	ID        string         `json:"id"`
	Identity  string         `json:"identity,omitempty"` // its token's (none in open rooms)
	Name      string         `json:"name,omitempty"`     // what the others see
	Viewer    bool           `json:"viewer,omitempty"`   // its token lets it receive only
	Muted     []string       `json:"muted,omitempty"`    // what it turned off: audio, video
	Publishes netip.AddrPort `json:"publishes,omitzero"` // its media's source, when it sends
	Screen    netip.AddrPort `json:"screen,omitzero"`    // its shared screen's source, when it shares one
	Receivers int            `json:"receivers"`          // participants its stream goes to
	Receives  int            `json:"receives"`           // streams it is sent
	Sent      Counter        `json:"sent"`               // what it sent into the data plane
	Forwarded Counter        `json:"forwarded"`          // copies of it the data plane sent on
	// LayerBPS is what each decode target of its video carries (bits/s,
	// on the wire; a target includes the layers below it), OtherBPS the
	// rest of its stream (its audio).
	LayerBPS []float64 `json:"layer_bps,omitempty"`
	OtherBPS float64   `json:"other_bps,omitempty"`
}

// Leg is one sender's stream to one receiver in an SFU room: what the
// receiver gets and why, and what its link carries.
type Leg struct {
	Room     string `json:"room"`
	Sender   string `json:"sender"`
	Receiver string `json:"receiver"`
	// Target is the decode target the receiver gets of the sender's
	// video ("every layer", "decode target N", "paused"), Reason why it
	// last moved.
	Target string `json:"target"`
	Reason string `json:"reason,omitempty"`
	// EstimateBPS is the receiver's link estimate (0: its link has shown
	// no limit), EstimateSource where it comes from (twcc: the SFU's
	// send-side estimate; remb: the receiver's).
	EstimateBPS    float64 `json:"estimate_bps"`
	EstimateSource string  `json:"estimate_source,omitempty"`
	Sent           Counter `json:"sent"`   // replicas
	Frames         uint64  `json:"frames"` // video frames among them
	// Retransmissions: NACKed packets sent from the SFU's history, asked
	// of the sender (the SFU never got them), and not sent (a layer the
	// receiver does not get; resent already or waiting; waited too long
	// for room in its link, a key frame asked for instead); Doubled, of
	// Retransmitted, sent a second time on a link losing packets at random.
	Retransmitted uint64 `json:"retransmitted"`
	Doubled       uint64 `json:"doubled"`
	AskedSender   uint64 `json:"asked_sender"`
	NotSent       uint64 `json:"not_sent"`
	TWCC          bool   `json:"twcc"`
	RTX           bool   `json:"rtx"`
}

// Address is where an admin endpoint listens: "unix:/path" or a loopback
// "IP:PORT".
type Address struct{ Network, Address string }

// ParseAddress reads an admin-listen value.
func ParseAddress(s string) (Address, error) {
	if path, ok := strings.CutPrefix(s, "unix:"); ok {
		if !filepath.IsAbs(path) {
			return Address{}, fmt.Errorf("%q: the socket path must be absolute", s)
		}
		return Address{"unix", path}, nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return Address{}, fmt.Errorf("%q is not unix:PATH or IP:PORT", s)
	}
	if !ap.Addr().IsLoopback() {
		return Address{}, fmt.Errorf("%s is not a loopback address (the endpoint has no login)", ap.Addr())
	}
	return Address{"tcp", ap.String()}, nil
}

const statusPath = "/v1/status"

// Serve answers GET /v1/status with snapshot() at addr until closed. A unix
// socket left by a dead server is replaced; one a live server answers on is
// not. The socket is for the server's user and group (and root) only.
func Serve(addr string, snapshot func() Status) (io.Closer, error) {
	a, err := ParseAddress(addr)
	if err != nil {
		return nil, err
	}
	if a.Network == "unix" {
		if err := claimSocketPath(a.Address); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen(a.Network, a.Address)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if a.Network == "unix" {
		_ = os.Chmod(a.Address, 0o660)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+statusPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(snapshot())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

func claimSocketPath(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("admin: another server answers on %s", path)
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("admin: %s exists and is not a socket", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	return nil
}

// Fetch reads a server's status from its admin endpoint.
func Fetch(ctx context.Context, addr string) (Status, error) {
	a, err := ParseAddress(addr)
	if err != nil {
		return Status{}, err
	}
	client := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, a.Network, a.Address)
		},
	}}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://admin"+statusPath, nil)
	if err != nil {
		return Status{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Status{}, fmt.Errorf("admin %s: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Status{}, fmt.Errorf("admin %s: %s", addr, resp.Status)
	}
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return Status{}, fmt.Errorf("admin %s: %w", addr, err)
	}
	return st, nil
}

// FastPath fills in where an engine runs, what it relayed, and what it
// handed to the kernel, by reason.
func FastPath(e *offload.Engine, st *Status) {
	for _, a := range e.Attachments() {
		st.Interfaces = append(st.Interfaces, Interface{Name: a.Iface, Hooks: a.Hooks(), Reason: a.Reason})
	}
	outcomes, err := e.Outcomes()
	if err != nil {
		return
	}
	toPeer, toClient := offload.FastByDirection(outcomes)
	st.Fast = Flow{ToPeer: Counter(toPeer), ToClient: Counter(toClient)}
	st.SlowReasons = map[string]uint64{}
	for o, n := range outcomes {
		if o.IsSlow() && n.Packets > 0 {
			st.SlowReasons[o.String()] = n.Packets
		}
	}
}

// FlowOf is a channel's fast-path counters.
func FlowOf(toPeer, toClient offload.FlowStats) Flow {
	return Flow{ToPeer: Counter{toPeer.Packets, toPeer.Bytes}, ToClient: Counter{toClient.Packets, toClient.Bytes}}
}
