package turnserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// waitForChannels polls the relay's metrics until n channels are in the fast
// path, and returns them; it gives up when the browser is done (done gets
// its result back for the caller) or after a minute.
func waitForChannels(t *testing.T, r *testbed.Relay, n float64, done chan error) testbed.Metrics {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		m := metrics(t, r)
		if m["ebrtc_xdp_channels"] >= n {
			return m
		}
		select {
		case err := <-done:
			done <- err
			t.Fatalf("the call ended before %v channels were bound; relay:\n%s", n, r.Output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v channels never bound; relay:\n%s", n, r.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type callResult struct {
	FramesDecoded    int `json:"framesDecoded"`
	BytesReceived    int `json:"bytesReceived"`
	VideoWidth       int `json:"videoWidth"`
	MessagesSent     int `json:"messagesSent"`
	MessagesReceived int `json:"messagesReceived"`
	CallerPair       struct{ Local, Remote string }
	CalleePair       struct{ Local, Remote string }
}

// Two relay-only RTCPeerConnections in headless Chromium call each other
// through ebrtc turn: a fake-camera video track and a data channel. Both
// relays are on this server, so the media is hairpinned, in XDP.
func TestBrowserRelayCall(t *testing.T) {
	browserRelayCall(t, newTestbed(t), 8, 0.99)
}

// browserRelayCall runs a call of the given seconds and wants at least
// share of the packets relayed once the call's channels are bound
// hairpinned on the fast path (before, ICE and DTLS set-up travel as Send
// indications, user space's by design).
func browserRelayCall(t *testing.T, tb *testbed.Testbed, seconds int, share float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := testbed.BrowserScript{NS: tb.Client, Script: "relay_call.mjs",
		Args:   []string{"turn:" + server4.String() + "?transport=udp", user, pass, strconv.Itoa(seconds)},
		Stdout: &stdout, Stderr: &stderr}.Command(t, ctx)
	r := startRelay(t, tb)
	before := metrics(t, r)
	wait := testenv.StartGroup(t, cmd)
	done := make(chan error, 1)
	go func() { done <- wait() }()
	bound := waitForChannels(t, r, 2, done)
	if err := <-done; err != nil {
		t.Fatalf("browser call: %v\nstderr:\n%s\nrelay:\n%s", err, stderr.String(), r.Output())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var res callResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("browser output %q: %v", stdout.String(), err)
	}
	t.Logf("browser: %+v", res)
	after := metrics(t, r)

	if res.CallerPair.Local != "relay" || res.CalleePair.Local != "relay" {
		t.Errorf("selected candidates not relayed: caller %+v callee %+v", res.CallerPair, res.CalleePair)
	}
	if res.FramesDecoded < 7*seconds || res.VideoWidth == 0 {
		t.Errorf("receiver decoded %d frames (width %d), want >= %d in %d s", res.FramesDecoded, res.VideoWidth, 7*seconds, seconds)
	}
	if res.MessagesSent == 0 || res.MessagesReceived < res.MessagesSent*9/10 {
		t.Errorf("data channel: %d of %d messages arrived", res.MessagesReceived, res.MessagesSent)
	}
	fast := after.Outcome("fast_hairpin") - before.Outcome("fast_hairpin")
	var slow, slowBound float64
	for _, dir := range []string{"client_to_peer", "peer_to_client"} {
		slow += after.Packets("slow", dir) - before.Packets("slow", dir)
		slowBound += after.Packets("slow", dir) - bound.Packets("slow", dir)
	}
	fastBound := after.Outcome("fast_hairpin") - bound.Outcome("fast_hairpin")
	reasons := map[string]float64{}
	for key, v := range after {
		if strings.HasPrefix(key, "ebrtc_turn_slow_path_packets_total{") && v > before[key] {
			reasons[key] = v - before[key]
		}
	}
	t.Logf("relay: %v packets hairpinned on the fast path, %v relayed in user space (once bound: %v and %v); to the kernel: %v",
		fast, slow, fastBound, slowBound, reasons)
	if fast < 500 || fastBound/(fastBound+slowBound) < share {
		t.Errorf("want >= %.0f%% of the media on the fast path once bound: hairpin %v, user space %v", 100*share, fastBound, slowBound)
	}
}
