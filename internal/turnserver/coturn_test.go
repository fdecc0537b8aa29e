package turnserver_test

import (
	"bytes"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

var lostRE = regexp.MustCompile(`Total lost packets (\d+) \(([\d.]+)%\)`)

// coturn's own client tools (Debian package coturn) against ebrtc turn:
// turnutils_uclient clients, each with a channel to turnutils_peer, which
// echoes everything back. No loss with the fast path on or off.
func TestCoturnClientInterop(t *testing.T) {
	for _, offload := range []string{"xdp", "off"} {
		t.Run("offload-"+offload, func(t *testing.T) {
			uclient := testenv.RequireCommand(t, "turnutils_uclient")
			peerBin := testenv.RequireCommand(t, "turnutils_peer")
			tb := newTestbed(t)
			r := startRelay(t, tb, "--offload", offload)
			var peerOut bytes.Buffer
			peer, err := testbed.Start(tb.Peer, &peerOut, peerBin, "-L", testbed.PeerIP4.String(), "-p", "3480")
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Stop(2 * time.Second)
			time.Sleep(200 * time.Millisecond)

			const clients, messages = 4, 300
			out, err := tb.Client.Command("timeout", "90", uclient,
				"-u", user, "-w", pass, "-e", testbed.PeerIP4.String(), "-r", "3480",
				"-n", strconv.Itoa(messages), "-m", strconv.Itoa(clients), "-l", "170", "-z", "5",
				"-X", "-c", "-L", testbed.ClientIP4.String(), server4.Addr().String()).CombinedOutput()
			if err != nil {
				t.Fatalf("turnutils_uclient: %v\n%s", err, out)
			}
			m := lostRE.FindSubmatch(out)
			if m == nil {
				t.Fatalf("no loss line in turnutils_uclient output:\n%s", out)
			}
			if string(m[1]) != "0" {
				t.Fatalf("turnutils_uclient lost %s packets (%s%%)", m[1], m[2])
			}
			// uclient sends messages on a channel per client and peer address
			// (3480 and 3481); the peer echoes them.
			metrics := metrics(t, r)
			total := float64(2 * clients * messages)
			for _, dir := range []string{"client_to_peer", "peer_to_client"} {
				fast, slow := metrics.Packets("fast", dir), metrics.Packets("slow", dir)
				if offload == "off" && fast != 0 {
					t.Errorf("%s: %v fast-path packets with the offload off", dir, fast)
				}
				if offload == "xdp" && fast < 0.99*total/2 {
					t.Errorf("%s: fast %v slow %v, want >= 99%% of %v on the fast path", dir, fast, slow, total/2)
				}
			}
		})
	}
}
