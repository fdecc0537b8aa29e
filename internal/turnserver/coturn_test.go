package turnserver_test

import (
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// coturn's own client tools (Debian package coturn) against ebrtc turn:
// turnutils_uclient clients, each with a channel to turnutils_peer, which
// echoes everything back. No loss with the fast path on or off.
func TestCoturnClientInterop(t *testing.T) {
	for _, offload := range []string{"xdp", "off"} {
		t.Run("offload-"+offload, func(t *testing.T) {
			testenv.RequireCommand(t, "turnutils_uclient")
			testenv.RequireCommand(t, "turnutils_peer")
			tb := newTestbed(t)
			r := startRelay(t, tb, "--offload", offload)
			peer, err := tb.StartTurnutilsPeer()
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Stop(2 * time.Second)

			const clients, messages = 4, 300
			lost, out, err := tb.RunTurnutilsUclient(user, pass, clients, messages, testbed.UclientChannels)
			if err != nil || lost != 0 {
				t.Fatalf("turnutils_uclient: lost %d, %v\n%s", lost, err, out)
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
