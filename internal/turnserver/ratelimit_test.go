package turnserver_test

import (
	"math"
	"net"
	"testing"

	"github.com/ebrtc/ebrtc/internal/ratelimit"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// --max-bps on both paths: a client and a peer each sending three times the
// limit get the limit through (within 5%, beyond the bucket's depth), and
// the rest is dropped and counted.
func TestBandwidthLimitEndToEnd(t *testing.T) {
	const (
		bps     = 800_000 // 100 kB/s
		size    = 1000
		rate    = 300 // datagrams/s: 3x the limit
		packets = 1200
	)
	limit, err := ratelimit.FromBitrate(bps)
	if err != nil {
		t.Fatal(err)
	}
	burst := float64(limit.Burst) / 1e9
	for _, mode := range []string{"xdp", "off"} {
		t.Run(mode, func(t *testing.T) {
			_, r, c, peer := streamingRelay(t, mode, "--max-bps", "800000")
			for _, dir := range []struct {
				name string
				src  net.PacketConn
				dst  net.Addr
				recv net.PacketConn
			}{
				{"client_to_peer", c.Relay, peer.LocalAddr(), peer},
				{"peer_to_client", peer, net.UDPAddrFromAddrPort(c.RelayAddr()), c.Relay},
			} {
				before := metrics(t, r)
				res, err := testbed.ExchangeAt(dir.src, dir.dst, dir.recv, packets, size, rate)
				if err != nil {
					t.Fatal(err)
				}
				after := metrics(t, r)
				// Sending lasts (packets-1)/rate seconds; the bucket starts full.
				sendTime := float64(packets-1) / rate
				want := float64(bps)/8*sendTime + burst
				got := float64(res.Received * size)
				t.Logf("%s: sent %d kB in %.1f s, delivered %.1f kB, limit allows %.1f kB", dir.name,
					packets*size/1000, sendTime, got/1000, want/1000)
				if math.Abs(got-want) > 0.05*float64(bps)/8*sendTime {
					t.Errorf("%s: delivered %.0f bytes, want %.0f within 5%%", dir.name, got, want)
				}
				dropped := after.Outcome("drop_rate_limit") - before.Outcome("drop_rate_limit") +
					after[`ebrtc_turn_dropped_total{reason="rate_limit"}`] - before[`ebrtc_turn_dropped_total{reason="rate_limit"}`]
				if lost := float64(res.Lost()); dropped < lost*0.99 || dropped > lost {
					t.Errorf("%s: %v drops counted, %v datagrams lost", dir.name, dropped, lost)
				}
				if mode == "xdp" {
					if fast, _ := fastShare(before, after, dir.name); fast < 0.9*float64(res.Received) {
						t.Errorf("%s: only %v of %d delivered on the fast path", dir.name, fast, res.Received)
					}
				}
			}
		})
	}
}
