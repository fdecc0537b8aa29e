package sfu

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

type inbound struct {
	PacketsReceived, PacketsLost, FramesDecoded, FreezeCount, FrameWidth float64
	Codec                                                                string
}

// Three headless Chromium participants meet through ebrtc sfu on the
// namespace testbed, set up as a container host is, for 30 s: each receives the others' audio and video,
// decoded, without freezes or loss; the media is forwarded by the eBPF data
// plane; one leaves and rejoins and decodes everyone again within 2 s.
func TestBrowserMeeting(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "chromium")
	node := testenv.RequireCommand(t, "node")
	script, _ := filepath.Abs("../testbed/browser/meeting.mjs")
	if _, err := os.Stat(filepath.Join(filepath.Dir(script), "node_modules", "playwright-core")); err != nil {
		testenv.Missing(t, "playwright-core not installed (scripts/install-deps runs npm ci)")
	}
	// As a container host has it: the browsers' veths send partial
	// checksums and run no XDP.
	tb, err := testbed.NewWith(testbed.Options{Unprepared: true})
	if err != nil {
		testenv.Missing(t, "testbed: %v", err)
	}
	t.Cleanup(func() { _ = tb.Close() })

	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan dataplane.Plane, 1)
	done := make(chan error, 1)
	go func() {
		done <- tb.Server.Do(func() error {
			return Run(ctx, Config{Listen: testbed.ServerClientIP4.String() + ":8088", Dataplane: "ebpf",
				Media:  []netip.AddrPort{netip.AddrPortFrom(testbed.ServerClientIP4, 40000)},
				Ifaces: []string{testbed.ServerCliIface},
				Ready:  func(_ net.Addr, p dataplane.Plane) { ready <- p }})
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("sfu: %v", err)
		}
	})
	var plane dataplane.Plane
	select {
	case plane = <-ready:
	case err := <-done:
		t.Fatalf("sfu: %v", err)
	}

	const participants, seconds = 3, 30
	run, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	cmd := exec.CommandContext(run, "ip", "netns", "exec", tb.Client.Name, node, script,
		"http://"+testbed.ServerClientIP4.String()+":8088/?room=test", strconv.Itoa(participants), strconv.Itoa(seconds))
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	testenv.StartGroup(t, cmd)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("meeting: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var res struct {
		Stats    []map[string]map[string]inbound
		RejoinMs float64
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		t.Fatalf("meeting output %q: %v", stdout.String(), err)
	}
	pages := res.Stats
	t.Logf("pages: %+v\nbrowser log:\n%s", pages, stderr.String())
	if len(pages) != participants {
		t.Fatalf("%d pages", len(pages))
	}
	for i, streams := range pages {
		if len(streams) != participants-1 {
			t.Errorf("participant %d receives %d streams, want %d", i, len(streams), participants-1)
		}
		for from, s := range streams {
			v, a := s["video"], s["audio"]
			// The page asks for 320x180 in AV1 (L1T3); the SFU negotiates AV1 and Opus only.
			if v.FramesDecoded < 5*seconds || a.PacketsReceived < 10*seconds || v.FreezeCount > 0 ||
				v.PacketsLost+a.PacketsLost > (v.PacketsReceived+a.PacketsReceived)/100 ||
				v.Codec != "video/AV1" || a.Codec != "audio/opus" || v.FrameWidth != 320 {
				t.Errorf("participant %d from %s: video %+v, audio %+v", i, from, v, a)
			}
		}
	}
	// Key frames come on request: the rejoining browser's own PLIs, routed
	// by the agent, and the SFU's when it adds the receiver (deduplicated).
	t.Logf("rejoined and decoding every stream after %v ms", res.RejoinMs)
	if res.RejoinMs <= 0 || res.RejoinMs > 2000 {
		t.Errorf("a participant that left and rejoined decoded every stream after %v ms, want within 2 s", res.RejoinMs)
	}
	o, err := plane.Outcomes()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("data plane: %v", o)
	// Media that reached the SFU before its receiver's connection was bound
	// is dropped (no_receivers); everything else is the data plane's.
	fwd := float64(o[dataplane.Replicated].Packets)
	var notFwd float64
	for _, k := range []dataplane.Outcome{dataplane.NoReceivers, dataplane.UnknownSender, dataplane.SourceRefused,
		dataplane.NoRoute, dataplane.Malformed, dataplane.Segmented, dataplane.RewriteFailed} {
		notFwd += float64(o[k].Packets)
	}
	if fwd < 500 || fwd/(fwd+notFwd) < 0.95 {
		t.Errorf("the eBPF data plane forwarded %v media datagrams and not %v, want >= 95%%", fwd, notFwd)
	}
}
