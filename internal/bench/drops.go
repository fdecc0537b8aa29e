package bench

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// endpointDrops counts datagrams the generator's own sockets dropped
// (UDP RcvbufErrors in the client and peer namespaces): loss there is the
// generator's limit, not the relay's.
func endpointDrops(tb *testbed.Testbed) uint64 {
	return UDPRcvbufErrors(tb.Client) + UDPRcvbufErrors(tb.Peer)
}

// UDPRcvbufErrors is the namespace's UDP datagrams dropped for a full
// socket buffer.
func UDPRcvbufErrors(ns *netns.NS) uint64 {
	n, _ := UDPCounter(ns, "RcvbufErrors")
	return n
}

// UDPCounter is one of the namespace's UDP counters (/proc/net/snmp).
func UDPCounter(ns *netns.NS, name string) (uint64, error) {
	out, err := ns.Output("cat", "/proc/net/snmp")
	if err != nil {
		return 0, err
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
		for i, h := range header {
			if h == name && i < len(fields) {
				return strconv.ParseUint(fields[i], 10, 64)
			}
		}
	}
	return 0, fmt.Errorf("no Udp %s in %s's /proc/net/snmp", name, ns.Name)
}

// LinkDrops are the datagrams the testbed's veths dropped, both ends, by
// interface ("server/eth-cli", "far/cli"...): where a ring overflowed.
func LinkDrops(tb *testbed.Testbed) map[string]uint64 {
	out := map[string]uint64{}
	count := func(ns *netns.NS, side string, ifaces ...string) {
		js, err := ns.Output("ip", "-j", "-s", "link", "show")
		if err != nil {
			return
		}
		var links []struct {
			Name  string `json:"ifname"`
			Stats struct {
				RX, TX struct {
					Dropped uint64 `json:"dropped"`
				}
			} `json:"stats64"`
		}
		if json.Unmarshal([]byte(js), &links) != nil {
			return
		}
		for _, l := range links {
			if slices.Contains(ifaces, l.Name) {
				out[side+"/"+l.Name] += l.Stats.RX.Dropped + l.Stats.TX.Dropped
			}
		}
	}
	var server []string
	for _, l := range tb.Links() {
		server = append(server, l.ServerIface)
		count(l.Far, "far", l.FarIface)
	}
	count(tb.Server, "server", server...)
	return out
}
