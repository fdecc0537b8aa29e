package admin

import (
	"bytes"
	"context"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParseAddress(t *testing.T) {
	for addr, ok := range map[string]bool{
		"unix:/run/ebrtc/turn.sock": true, "127.0.0.1:9000": true, "[::1]:9000": true,
		"unix:run/turn.sock": false, "10.0.0.1:9000": false, "0.0.0.0:9000": false, "[::]:9000": false, "localhost:9000": false, "": false,
	} {
		if _, err := ParseAddress(addr); (err == nil) != ok {
			t.Errorf("ParseAddress(%q): %v, want ok %v", addr, err, ok)
		}
	}
}

// The endpoint answers over a unix socket, refuses a second server on the
// same socket, and replaces the socket a closed one left.
func TestServeAndFetch(t *testing.T) {
	addr := "unix:" + filepath.Join(t.TempDir(), "run", "admin.sock")
	want := Status{Server: "turn", Pid: 42, Allocations: []Allocation{{Client: netip.MustParseAddrPort("192.0.2.1:5000"), User: "alice"}}}
	srv, err := Serve(addr, func() Status { return want })
	if err != nil {
		t.Fatal(err)
	}
	got, err := Fetch(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	if got.Server != "turn" || got.Pid != 42 || len(got.Allocations) != 1 || got.Allocations[0].User != "alice" ||
		got.Allocations[0].Client != want.Allocations[0].Client {
		t.Errorf("fetched %+v", got)
	}
	if _, err := Serve(addr, func() Status { return Status{} }); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Errorf("a second server on the socket: %v", err)
	}
	srv.Close()
	srv2, err := Serve(addr, func() Status { return Status{Server: "sfu"} })
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	defer srv2.Close()
	if got, err := Fetch(context.Background(), addr); err != nil || got.Server != "sfu" {
		t.Errorf("second server: %+v %v", got, err)
	}
}

// Rates are the counters' differences over the snapshots' interval.
func TestRender(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	client, relay := netip.MustParseAddrPort("192.0.2.1:5000"), netip.MustParseAddrPort("198.51.100.1:50000")
	snap := func(at time.Time, fastPackets, slowPackets uint64) Status {
		fast := Flow{ToPeer: Counter{fastPackets, 100 * fastPackets}}
		slow := Flow{ToClient: Counter{slowPackets, 50 * slowPackets}}
		return Status{Server: "turn", Pid: 7, Time: at, Fast: fast, Slow: slow,
			Interfaces:  []Interface{{"eth0", "xdp+tc", "device with a driver of its own"}},
			SlowReasons: map[string]uint64{"not_channel_data": slowPackets},
			Users:       []User{{Name: "alice", Allocations: 1, Fast: fast, Slow: slow}},
			Allocations: []Allocation{{Client: client, Relay: relay, User: "alice", Slow: slow,
				Channels: []Channel{{Number: 0x4000, Peer: netip.MustParseAddrPort("203.0.113.9:7000"), Offload: true, Fast: fast}}}},
		}
	}
	var b bytes.Buffer
	// 2 s apart: 4,000 fast packets of 100 bytes (2,000/s, 1.6 Mbit/s), 20 slow of 50 (10/s, 4 kbit/s).
	Render(&b, snap(t0, 1000, 10), snap(t0.Add(2*time.Second), 5000, 30))
	out := b.String()
	for _, want := range []string{"ebrtc turn  pid 7", "rates over 2.0s", "fast path on eth0: xdp+tc",
		"not_channel_data 10/s (30)", "alice", "0x4000", "203.0.113.9:7000"} {
		if !strings.Contains(out, want) {
			t.Errorf("frame lacks %q:\n%s", want, out)
		}
	}
	for re, what := range map[string]string{
		`fast to peer\s+2\.0k\s+1\.6M\s+5000\s+500000`:                "the fast totals row",
		`slow to client\s+10\s+4\.0k\s+30\s+1500`:                     "the slow totals row",
		`alice\s+1\s+2\.0k\s+1\.6M\s+10\s+4\.0k`:                      "the user's row",
		`0x4000\s+203\.0\.113\.9:7000\s+fast\s+2\.0k\s+1\.6M\s+0\s+0`: "the channel's row",
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("%s does not match %q:\n%s", what, re, out)
		}
	}
	// A first frame, or a new process: no rates.
	b.Reset()
	Render(&b, Status{}, snap(t0, 1000, 10))
	if !regexp.MustCompile(`fast to peer\s+-\s+-\s+1000`).MatchString(b.String()) {
		t.Errorf("a first frame shows rates:\n%s", b.String())
	}
}

// An SFU's legs: frames and bytes per second over the interval, the
// receiver's estimate and where it comes from, and why its target moved.
func TestRenderLegs(t *testing.T) {
	t0 := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	snap := func(at time.Time, n uint64) Status {
		return Status{Server: "sfu", Pid: 9, Time: at, Legs: []Leg{
			{Room: "r", Sender: "alice", Receiver: "bob", Target: "decode target 0", Reason: "link estimate",
				EstimateBPS: 180e3, EstimateSource: "twcc", Sent: Counter{50 * n, 500 * 50 * n}, Frames: 15 * n,
				Retransmitted: 3 * n, AskedSender: n},
			{Room: "r", Sender: "bob", Receiver: "alice", Target: "every layer", Sent: Counter{n, 100 * n}},
		}}
	}
	var b bytes.Buffer
	// 2 s apart, n 1 -> 3: 100 packets of 500 bytes (50/s, 200 kbit/s), 30 frames (15/s).
	Render(&b, snap(t0, 1), snap(t0.Add(2*time.Second), 3))
	out := b.String()
	for re, what := range map[string]string{
		`r\s+alice\s+bob\s+decode target 0\s+15\.0\s+200\.0k\s+180\.0k \(twcc\)\s+9\s+3\s+link estimate`: "the constrained leg",
		`r\s+bob\s+alice\s+every layer\s+0\.0\s+800\s+no limit\s+0\s+0\s+-`:                              "the unconstrained leg",
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("%s does not match %q:\n%s", what, re, out)
		}
	}
	b.Reset()
	Render(&b, Status{}, snap(t0, 1))
	if !regexp.MustCompile(`alice\s+bob\s+decode target 0\s+-\s+-`).MatchString(b.String()) {
		t.Errorf("a first frame shows rates:\n%s", b.String())
	}
}

// An SFU's rooms: each participant with its name, what it publishes (or
// that it is a viewer) and what it turned off.
func TestRenderRooms(t *testing.T) {
	st := Status{Server: "sfu", Rooms: []Room{{Name: "standup", Participants: []Participant{
		{ID: "aaaa", Identity: "ann", Name: "Ann", Publishes: netip.MustParseAddrPort("10.0.0.5:5000"), Muted: []string{"audio", "video"}, Receivers: 2},
		{ID: "bbbb", Identity: "vic", Name: "vic", Viewer: true, Receives: 1},
	}}}}
	var b bytes.Buffer
	Render(&b, Status{}, st)
	out := b.String()
	for re, what := range map[string]string{
		`standup\s+aaaa\s+Ann\s+10\.0\.0\.5:5000\s+audio,video\s+2\s+0`: "the muted publisher",
		`standup\s+bbbb\s+vic\s+\(viewer\)\s+-\s+0\s+1`:                 "the viewer",
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("%s does not match %q:\n%s", what, re, out)
		}
	}
}
