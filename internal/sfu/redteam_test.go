package sfu

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

// A red team at the door of an encrypted meeting in progress (a
// publisher, three receivers, all with tokens): expired, forged, edited,
// wrong-room and replayed tokens (the publisher's own), none at all, and
// a flood of joins from one address. None gets in, each refusal is
// counted by its reason, nobody in the meeting is replaced, and every
// receiver gets every packet of the publisher's stream, byte for byte.
func TestAccessRedTeam(t *testing.T) {
	// The limits an operator runs with (the defaults), not the testbed's.
	tb, _, _ := testbedSFUWith(t, "user+encrypted", func(c *Config) { c.Access.JoinRate, c.Access.JoinBurst = 0, 0 }, testbed.SFUMedia)
	var mu sync.Mutex
	var issued []string
	cfg := synth.Config{Net: synth.NetIn(tb.Client), Server: testbed.SFUWeb.String(), Room: "scale", Ledger: &synth.Ledger{},
		Encrypted: true, SignalingTLS: &tls.Config{InsecureSkipVerify: true},
		Token: func() string {
			tok := testbed.SFUTokens("scale")()
			mu.Lock()
			issued = append(issued, tok)
			mu.Unlock()
			return tok
		}}
	firstJoin := time.Now() // the address's bucket is full here
	pub, stream, rcv, count := joinPass(t, cfg, []synth.Config{cfg, cfg, cfg})
	before := participantIDs(t)
	sent := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		n, err := pub.Send(ctx, 0, count, 1)
		if err == nil && n != count {
			err = fmt.Errorf("sent %d of %d", n, count)
		}
		sent <- err
	}()

	door := redTeam{t: t, dial: synth.NetIn(tb.Client).DialTCP}
	secret := []byte(testbed.SFUTokenSecret)
	grant := access.Grant{Room: "scale", Identity: "mallory", Publish: true}
	expired, _ := access.Mint(secret, grant, time.Now().Add(-2*time.Hour), time.Hour)
	forged, _ := access.Mint([]byte("not the SFU's secret, but 32 bytes long"), grant, time.Now(), time.Hour)
	parts := strings.Split(testbed.SFUToken("scale", "mallory"), ".")
	edited := parts[0] + "." + strings.Split(issued[0], ".")[1] + "." + parts[2] // the publisher's claims, another signature
	mu.Lock()
	publisherToken := issued[0]
	mu.Unlock()
	for _, a := range []struct {
		name, token, room string
		reason            access.Reason
	}{
		{"expired", expired, "", access.Expired},
		{"forged", forged, "", access.Signature},
		{"edited", edited, "", access.Signature},
		{"wrong room", testbed.SFUToken("other", "mallory"), "scale", access.WrongRoom},
		{"replayed (the publisher's)", publisherToken, "", access.Replayed},
		{"no token", "", "scale", access.NoToken},
	} {
		if got := door.knock(a.token, a.room); !strings.Contains(got, "("+string(a.reason)+")") {
			t.Errorf("%s: %q, want a refusal (%s)", a.name, got, a.reason)
		}
	}
	// The flood: 300 joins without a token, as fast as one client goes;
	// past the address's burst the refusal comes before any WebSocket.
	var tooMany int
	for range 300 {
		if strings.Contains(door.knock("", "scale"), "429") {
			tooMany++
		}
	}
	// The address's bucket (20 at once, 5 a second) let in at most its
	// burst and what refilled since the meeting's first join: 10 joins
	// were the meeting's and the red team's before the flood.
	refilled := 5 * time.Since(firstJoin).Seconds()
	t.Logf("flood: %d of 300 refused at the upgrade (429), the others for want of a token; the bucket refilled %.0f since the first join", tooMany, refilled)
	if admitted := 300 - tooMany; float64(admitted) > 20-10+refilled+1 || tooMany == 0 {
		t.Errorf("%d of 300 flooding joins got past the join rate, want at most %.0f", admitted, 20-10+refilled+1)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}

	m, err := testbed.ScrapeMetrics(tb.Client, testbed.ServerClientIP4.String()+":9108")
	if err != nil {
		t.Fatal(err)
	}
	want := map[access.Reason]float64{access.Expired: 1, access.Signature: 2, access.WrongRoom: 1, access.Replayed: 1,
		access.NoToken: float64(301 - tooMany), access.Rate: float64(tooMany)}
	for r, n := range want {
		if got := m.Labeled("ebrtc_sfu_join_refusals_total", map[string]string{"reason": string(r)}); got != n {
			t.Errorf("refusals (%s): %v, want %v", r, got, n)
		}
	}
	if got, sum := m.Labeled("ebrtc_sfu_join_refusals_total", nil), 306.0; got != sum {
		t.Errorf("%v refusals in all, want %v", got, sum)
	}
	// Nobody got in or was replaced, and the meeting lost nothing.
	if after := participantIDs(t); !slices.Equal(after, before) || len(after) != 4 {
		t.Errorf("participants before the attack %v, after %v", before, after)
	}
	requireEveryPacket(t, pub, stream, rcv, count)
}

// participantIDs are the ids of the participants of the testbed SFU's
// rooms (its admin endpoint), sorted.
func participantIDs(t *testing.T) []string {
	t.Helper()
	st, err := admin.Fetch(context.Background(), sfuAdmin)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range st.Rooms {
		for _, p := range r.Participants {
			ids = append(ids, r.Name+"/"+p.ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// requireEveryPacket: each receiver got each of the publisher's count
// packets once, as sent (waiting up to 5 s for the last). It returns the
// packets missing and the worst jitter, for the log.
func requireEveryPacket(t *testing.T, pub *synth.Participant, stream *synth.Stream, rcv []*synth.Participant, count int) (missing int, worst time.Duration) {
	t.Helper()
	want := map[uint32]int{}
	for k := range count {
		b, _, _ := stream.Packet(k)
		want[binary.BigEndian.Uint32(b[8:])]++
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		missing = 0
		for _, r := range rcv {
			per, _, _ := r.Incoming()[pub.ID].Stats()
			for ssrc, w := range want {
				missing += w - per[ssrc].Packets
			}
		}
		if missing == 0 {
			break
		}
	}
	for i, r := range rcv {
		per, mismatched, _ := r.Incoming()[pub.ID].Stats()
		if mismatched != 0 {
			t.Errorf("receiver %d: %d packets not as sent", i, mismatched)
		}
		for ssrc, w := range want {
			if per[ssrc].Packets != w {
				t.Errorf("receiver %d, SSRC %#x: %d of %d packets", i, ssrc, per[ssrc].Packets, w)
			}
			worst = max(worst, per[ssrc].Jitter)
		}
	}
	return missing, worst
}

// redTeam joins the testbed SFU as an attacker would, from a client host.
type redTeam struct {
	t    *testing.T
	dial func(addr string) (net.Conn, error)
}

// knock tries one join and returns how it was refused: the HTTP status
// of a refused upgrade, or the SFU's error message. A join that gets in
// fails the test.
func (r redTeam) knock(token, room string) string {
	r.t.Helper()
	client := &http.Client{Transport: &http.Transport{
		DialContext:     func(context.Context, string, string) (net.Conn, error) { return r.dial(testbed.SFUWeb.String()) },
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "wss://"+testbed.SFUWeb.String()+"/ws", &websocket.DialOptions{HTTPClient: client})
	if err != nil {
		if resp != nil {
			return fmt.Sprint(resp.StatusCode)
		}
		r.t.Fatalf("dial: %v", err)
	}
	defer ws.CloseNow()
	if err := wsjson.Write(ctx, ws, map[string]string{"type": "join", "token": token, "room": room}); err != nil {
		r.t.Fatal(err)
	}
	var m struct{ Type, Text string }
	if err := wsjson.Read(ctx, ws, &m); err != nil {
		r.t.Fatalf("no answer to a join: %v", err)
	}
	if m.Type != "error" {
		r.t.Errorf("a join with token %q got %+v", token, m)
	}
	return m.Text
}
