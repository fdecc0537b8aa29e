package bench

import (
	"strconv"
	"strings"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// endpointDrops counts datagrams the generator's own sockets dropped
// (UDP RcvbufErrors in the client and peer namespaces): loss there is the
// generator's limit, not the relay's.
func endpointDrops(tb *testbed.Testbed) uint64 {
	return udpRcvbufErrors(tb.Client) + udpRcvbufErrors(tb.Peer)
}

func udpRcvbufErrors(ns *netns.NS) uint64 {
	out, err := ns.Output("cat", "/proc/net/snmp")
	if err != nil {
		return 0
	}
	var header []string
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || fields[0] != "Udp:" {
			continue
		}
		if header == nil {
			header = fields
			continue
		}
		for i, name := range header {
			if name == "RcvbufErrors" && i < len(fields) {
				n, _ := strconv.ParseUint(fields[i], 10, 64)
				return n
			}
		}
	}
	return 0
}
