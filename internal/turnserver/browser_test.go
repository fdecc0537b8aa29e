package turnserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

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
	browserRelayCall(t, newTestbed(t))
}

func browserRelayCall(t *testing.T, tb *testbed.Testbed) {
	testenv.RequireCommand(t, "chromium")
	node := testenv.RequireCommand(t, "node")
	script, _ := filepath.Abs("testdata/browser/relay_call.mjs")
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "playwright-core")); err != nil {
		testenv.Missing(t, "playwright-core not installed (scripts/install-deps runs npm ci)")
	}
	r := startRelay(t, tb)
	before := metrics(t, r)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", tb.Client.Name, node, script,
		"turn:"+server4.String()+"?transport=udp", user, pass, "8")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
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
	if res.FramesDecoded < 60 || res.VideoWidth == 0 {
		t.Errorf("receiver decoded %d frames (width %d), want >= 60 in 8 s", res.FramesDecoded, res.VideoWidth)
	}
	if res.MessagesSent == 0 || res.MessagesReceived < res.MessagesSent*9/10 {
		t.Errorf("data channel: %d of %d messages arrived", res.MessagesReceived, res.MessagesSent)
	}
	fast := after.Outcome("fast_hairpin") - before.Outcome("fast_hairpin")
	var slow float64
	for _, dir := range []string{"client_to_peer", "peer_to_client"} {
		slow += after.Packets("slow", dir) - before.Packets("slow", dir)
	}
	t.Logf("relay: %v packets hairpinned in XDP, %v relayed in user space", fast, slow)
	if fast < 500 || fast/(fast+slow) < 0.9 {
		t.Errorf("the bulk of the media must go through XDP: hairpin %v, user space %v", fast, slow)
	}
}
