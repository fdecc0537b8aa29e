package offload

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestFastByDirectionCountsHairpinBothWays(t *testing.T) {
	toPeer, toClient := FastByDirection(map[Outcome]Counter{
		FastClientToPeer: {Packets: 10, Bytes: 100},
		FastPeerToClient: {Packets: 5, Bytes: 50},
		FastHairpin:      {Packets: 2, Bytes: 20},
	})
	if toPeer != (Counter{Packets: 12, Bytes: 120}) || toClient != (Counter{Packets: 7, Bytes: 70}) {
		t.Fatalf("to peer %+v, to client %+v", toPeer, toClient)
	}
}

// Without a fast path, the slow path's counters and the gauges still export.
func TestCollectorUserSpaceOnly(t *testing.T) {
	c := NewCollector(nil,
		func() (Counter, Counter) {
			return Counter{Packets: 3, Bytes: 30}, Counter{Packets: 4, Bytes: 40}
		},
		func() (int, int) { return 2, 5 })
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	want := `
# HELP ebrtc_turn_allocations Current allocations.
# TYPE ebrtc_turn_allocations gauge
ebrtc_turn_allocations 2
# HELP ebrtc_turn_packets_total Relayed data packets by path (fast: in the kernel, XDP or TC; slow: user space) and direction.
# TYPE ebrtc_turn_packets_total counter
ebrtc_turn_packets_total{direction="client_to_peer",path="fast"} 0
ebrtc_turn_packets_total{direction="client_to_peer",path="slow"} 3
ebrtc_turn_packets_total{direction="peer_to_client",path="fast"} 0
ebrtc_turn_packets_total{direction="peer_to_client",path="slow"} 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "ebrtc_turn_allocations", "ebrtc_turn_packets_total"); err != nil {
		t.Fatal(err)
	}
}
