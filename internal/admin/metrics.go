package admin

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebrtc/ebrtc/internal/metrics"
)

// Per-user and per-allocation traffic, on both paths (the fast path's read
// from each channel's BPF counters). Opt-in (metrics-labels), like coturn's
// --prometheus-username-labels: a series per user, or per allocation, is
// as many series as users or allocations.
var (
	userPacketsDesc = prometheus.NewDesc("ebrtc_turn_user_packets_total",
		"Relayed data packets per user (over its allocations, ended ones included), by path and direction.",
		[]string{"user", "path", "direction"}, nil)
	userBytesDesc = prometheus.NewDesc("ebrtc_turn_user_bytes_total",
		"Relayed data bytes per user, by path and direction.", []string{"user", "path", "direction"}, nil)
	userAllocationsDesc = prometheus.NewDesc("ebrtc_turn_user_allocations", "Current allocations per user.", []string{"user"}, nil)
	allocPacketsDesc    = prometheus.NewDesc("ebrtc_turn_allocation_packets_total",
		"Relayed data packets per allocation (client and relay address), by path and direction.",
		[]string{"user", "client", "relay", "path", "direction"}, nil)
	allocBytesDesc = prometheus.NewDesc("ebrtc_turn_allocation_bytes_total",
		"Relayed data bytes per allocation, by path and direction.", []string{"user", "client", "relay", "path", "direction"}, nil)
)

// UserCollector exports a server's per-user (and with perAllocation, also
// per-allocation) traffic from its admin status.
type UserCollector struct {
	status        func() Status
	perAllocation bool
}

// NewUserCollector builds the collector.
func NewUserCollector(status func() Status, perAllocation bool) *UserCollector {
	return &UserCollector{status: status, perAllocation: perAllocation}
}

func (c *UserCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{userPacketsDesc, userBytesDesc, userAllocationsDesc, allocPacketsDesc, allocBytesDesc} {
		ch <- d
	}
}

func (c *UserCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.status()
	for _, u := range st.Users {
		ch <- prometheus.MustNewConstMetric(userAllocationsDesc, prometheus.GaugeValue, float64(u.Allocations), u.Name)
		emitFlows(ch, userPacketsDesc, userBytesDesc, u.Fast, u.Slow, u.Name)
	}
	if !c.perAllocation {
		return
	}
	for _, a := range st.Allocations {
		emitFlows(ch, allocPacketsDesc, allocBytesDesc, a.Fast, a.Slow, a.User, a.Client.String(), a.Relay.String())
	}
}

// emitFlows emits both paths and directions; labels come first, then path
// and direction.
func emitFlows(ch chan<- prometheus.Metric, packets, bytes *prometheus.Desc, fast, slow Flow, labels ...string) {
	for path, f := range map[string]Flow{"fast": fast, "slow": slow} {
		for direction, n := range map[string]Counter{metrics.ClientToPeer: f.ToPeer, metrics.PeerToClient: f.ToClient} {
			l := append(append([]string{}, labels...), path, direction)
			ch <- prometheus.MustNewConstMetric(packets, prometheus.CounterValue, float64(n.Packets), l...)
			ch <- prometheus.MustNewConstMetric(bytes, prometheus.CounterValue, float64(n.Bytes), l...)
		}
	}
}
