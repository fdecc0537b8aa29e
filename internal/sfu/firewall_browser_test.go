package sfu

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// A participant whose network drops every UDP datagram (nftables in its
// namespace, both ways), in Firefox ESR, joins an encrypted meeting of two
// Chromium pages through ebrtc turn over TCP: the TURN server runs on a host of its own
// (the peer namespace), shares its REST secret with the SFU, and allows
// the SFU's address as a peer (private, refused by default); the SFU
// hands each participant credentials of its own as it joins. The
// firewalled page sees and hears both others, they see and hear it, each
// of its connections runs through the relay over TCP, and the firewall
// dropped the UDP the browser tried.
func TestBrowserBehindFirewall(t *testing.T) {
	const turnSecret = "the testbed's TURN REST secret"
	turnAddr := testbed.PeerIP4.String() + ":3478"
	testenv.RequireCommand(t, "firefox-esr")
	tb, _, _ := testbedSFUWith(t, "user+encrypted+vp8", func(c *Config) {
		c.TURN = TURN{URLs: []string{"turn:" + turnAddr + "?transport=tcp"}, Secret: []byte(turnSecret)}
	}, testbed.SFUMedia)
	// The server namespace routes between the firewalled host and the
	// TURN server's (it forwards nothing by default).
	testenv.Must(t, exec.Command("ip", "netns", "exec", tb.Server.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1").Run())
	bin, err := testbed.BuildEbrtc(t.TempDir())
	testenv.Must(t, err)
	out := &testbed.LineBuffer{}
	turn, err := testbed.Start(tb.Peer, out, bin, "turn", "--listen", "tcp://"+turnAddr, "--listen", "udp://"+turnAddr,
		"--auth-secret", turnSecret, "--relay-ip", testbed.PeerIP4.String(), "--allow-peer", testbed.SFUMedia.Addr().String(),
		"--offload", "off", "--metrics-listen", testbed.PeerIP4.String()+":9109")
	testenv.Must(t, err)
	t.Cleanup(func() { _ = turn.Stop(5 * time.Second) })
	for deadline := time.Now().Add(15 * time.Second); !strings.Contains(out.String(), "ready\n"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("ebrtc turn did not start:\n%s", out.String())
		}
	}
	fw, _, _, err := tb.AddClient(1)
	testenv.Must(t, err)
	firewall(t, fw)

	// Both runs measure over their 15 s, then hold their pages while the
	// other may still measure them; neither rejoins (a rejoin renames a
	// participant under the other's feet).
	spec := meetingSpec{scheme: "https", browsers: "chromium", publishers: 2, seconds: 15, toggle: -1,
		env: []string{"OTHERS=1", "REJOIN=0", "HOLD=8"}}
	base := spec.scheme + "://" + testbed.SFUWeb.String() + "/"
	tok, err := access.Mint([]byte(testbed.SFUTokenSecret), access.Grant{Room: "test", Identity: "firewalled", Publish: true}, time.Now(), time.Hour)
	testenv.Must(t, err)
	var fwOut, fwErr bytes.Buffer
	fwDone := make(chan error, 1)
	stdout, stderr := browserMeetingAt(t, tb, spec, func(context.Context) {
		fwDone <- runFirewalledPage(t, fw, base+"?token="+tok, spec.seconds, &fwOut, &fwErr)
	})
	if err := <-fwDone; err != nil {
		t.Fatalf("the firewalled page: %v\n%s", err, fwErr.String())
	}
	var main, behind meetingOutput
	testenv.Must(t, lastJSON(stdout, &main))
	testenv.Must(t, lastJSON(fwOut.String(), &behind))
	t.Logf("pages: %+v\nfirewalled: %+v\nbrowser log:\n%s\nfirewalled page's log:\n%s", main.Stats, behind.Stats, stderr, fwErr.String())
	if len(behind.IDs) != 1 || len(main.IDs) != 2 {
		t.Fatalf("ids %v and %v", main.IDs, behind.IDs)
	}
	seconds := float64(spec.seconds)
	decodes := func(who string, s map[string]inbound) bool {
		v, a := s["video"], s["audio"]
		ok := v.FramesDecoded >= 5*seconds && a.PacketsReceived >= 10*seconds && v.FrameWidth == 320
		if !ok {
			t.Errorf("%s: video %+v, audio %+v", who, v, a)
		}
		return ok
	}
	for i, page := range main.Stats {
		decodes("participant "+main.IDs[i]+" from the firewalled one", page[behind.IDs[0]])
	}
	for _, from := range main.IDs {
		decodes("the firewalled participant from "+from, behind.Stats[0][from])
	}
	t.Logf("the firewalled page's connections: %v; the others': %v", behind.Paths, main.Paths)
	if p := behind.Paths[0]; len(p) != 3 || slices.ContainsFunc(p, func(s string) bool { return s != "relay/tcp" }) {
		t.Errorf("the firewalled page's connections run %v, want 3 through the relay over TCP", p)
	}
	dropped := nftDropped(t, fw)
	t.Logf("the firewall dropped %d UDP datagrams", dropped)
	if dropped == 0 {
		t.Error("the firewall dropped no UDP: the browser never tried it, or the rules did not hold")
	}
}

// meetingOutput is meeting.mjs's JSON line, as far as these tests read it.
type meetingOutput struct {
	Stats []map[string]map[string]inbound
	IDs   []string
	Paths [][]string
}

func lastJSON(stdout string, v any) error {
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	return json.Unmarshal([]byte(lines[len(lines)-1]), v)
}

// firewall makes ns drop every UDP datagram in and out (loopback aside),
// counting them.
func firewall(t *testing.T, ns *netns.NS) {
	t.Helper()
	testenv.RequireCommand(t, "nft")
	rules := `table inet firewall {
	chain in { type filter hook input priority 0; iif "lo" accept; meta l4proto udp counter drop; }
	chain out { type filter hook output priority 0; oif "lo" accept; meta l4proto udp counter drop; }
}`
	cmd := exec.Command("ip", "netns", "exec", ns.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, b)
	}
}

// nftDropped is what the firewall's rules dropped, in and out.
func nftDropped(t *testing.T, ns *netns.NS) uint64 {
	b, err := exec.Command("ip", "netns", "exec", ns.Name, "nft", "-j", "list", "table", "inet", "firewall").Output()
	testenv.Must(t, err)
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	testenv.Must(t, json.Unmarshal(b, &doc))
	var n uint64
	for _, o := range doc.Nftables {
		rule, ok := o["rule"]
		if !ok {
			continue
		}
		var r struct {
			Expr []map[string]json.RawMessage `json:"expr"`
		}
		testenv.Must(t, json.Unmarshal(rule, &r))
		for _, e := range r.Expr {
			if c, ok := e["counter"]; ok {
				var cnt struct{ Packets uint64 }
				testenv.Must(t, json.Unmarshal(c, &cnt))
				n += cnt.Packets
			}
		}
	}
	return n
}

// runFirewalledPage runs one meeting page (meeting.mjs) in ns until it is
// done (at most 2 minutes).
func runFirewalledPage(t *testing.T, ns *netns.NS, url string, seconds int, stdout, stderr *bytes.Buffer) error {
	ctx, stop := context.WithTimeout(context.Background(), 2*time.Minute)
	defer stop()
	return testbed.BrowserScript{NS: ns, Script: "meeting.mjs", Args: []string{url, "1", strconv.Itoa(seconds)}, Browsers: "firefox",
		Env: []string{"REJOIN=0", "HOLD=8"}, Stdout: stdout, Stderr: stderr}.Run(t, ctx)
}
