package offload

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebrtc/ebrtc/internal/metrics"
)

// The TURN relay's counters for Prometheus: both paths, the fast path's
// outcomes, its interfaces.

var (
	packetsDesc = prometheus.NewDesc("ebrtc_turn_packets_total",
		"Relayed data packets by path (fast: in the kernel, XDP or TC; slow: user space) and direction.", []string{"path", "direction"}, nil)
	bytesDesc = prometheus.NewDesc("ebrtc_turn_bytes_total",
		"Relayed data bytes (without TURN framing) by path and direction.", []string{"path", "direction"}, nil)
	slowReasonDesc = prometheus.NewDesc("ebrtc_turn_slow_path_packets_total",
		"Packets the fast path (XDP or TC) handed to the kernel, by reason.", []string{"reason"}, nil)
	xdpDesc = prometheus.NewDesc("ebrtc_xdp_packets_total",
		"Every packet the fast path (XDP or TC) saw, by outcome.", []string{"outcome"}, nil)
	allocationsDesc = prometheus.NewDesc("ebrtc_turn_allocations", "Current allocations.", nil, nil)
	channelsDesc    = prometheus.NewDesc("ebrtc_turn_channels", "Current channel bindings.", nil, nil)
	offloadedDesc   = prometheus.NewDesc("ebrtc_xdp_channels", "Channels installed in the fast path (XDP and TC share them).", nil, nil)
	attachedDesc    = prometheus.NewDesc("ebrtc_offload_attached",
		"1 for each interface the fast path runs on: its hooks (xdp, tc, xdp+tc) and why so.", []string{"iface", "mode", "reason"}, nil)
	xmitFailuresDesc = prometheus.NewDesc("ebrtc_offload_xmit_failures_total",
		"Frames sent from XDP (XDP_TX, redirect) that the interface did not take; one that takes none gets no more.", []string{"iface"}, nil)
)

// Collector reads the fast path's BPF counters and the slow path's
// counters at scrape time.
type Collector struct {
	engine *Engine // nil: user space only
	slow   func() (toPeer, toClient Counter)
	counts func() (allocations, channels int)
}

// NewCollector builds the collector; engine may be nil (no fast path), and
// slow may be nil (a snooped server whose user-space relaying is unseen).
func NewCollector(engine *Engine, slow func() (toPeer, toClient Counter), counts func() (int, int)) *Collector {
	return &Collector{engine: engine, slow: slow, counts: counts}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{packetsDesc, bytesDesc, slowReasonDesc, xdpDesc, allocationsDesc, channelsDesc, offloadedDesc, attachedDesc, xmitFailuresDesc} {
		ch <- d
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	allocs, chans := c.counts()
	ch <- prometheus.MustNewConstMetric(allocationsDesc, prometheus.GaugeValue, float64(allocs))
	ch <- prometheus.MustNewConstMetric(channelsDesc, prometheus.GaugeValue, float64(chans))

	if c.slow != nil {
		toPeer, toClient := c.slow()
		emitPair(ch, "slow", metrics.ClientToPeer, toPeer)
		emitPair(ch, "slow", metrics.PeerToClient, toClient)
	}

	var fastToPeer, fastToClient Counter
	if c.engine != nil {
		outcomes, err := c.engine.Outcomes()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(xdpDesc, err)
			return
		}
		fastToPeer, fastToClient = FastByDirection(outcomes)
		// What XDP sent but the egress refused was not relayed.
		failedToPeer, failedToClient := c.engine.XmitFailed()
		fastToPeer.Packets -= min(failedToPeer, fastToPeer.Packets)
		fastToClient.Packets -= min(failedToClient, fastToClient.Packets)
		ch <- prometheus.MustNewConstMetric(offloadedDesc, prometheus.GaugeValue, float64(c.engine.ChannelCount()))
		for _, a := range c.engine.Attachments() {
			ch <- prometheus.MustNewConstMetric(attachedDesc, prometheus.GaugeValue, 1, a.Iface, a.Hooks(), a.Reason)
			ch <- prometheus.MustNewConstMetric(xmitFailuresDesc, prometheus.CounterValue, float64(c.engine.XmitFailures(a.Index)), a.Iface)
		}
		for o, n := range outcomes {
			ch <- prometheus.MustNewConstMetric(xdpDesc, prometheus.CounterValue, float64(n.Packets), o.String())
			if o.IsSlow() {
				ch <- prometheus.MustNewConstMetric(slowReasonDesc, prometheus.CounterValue, float64(n.Packets), o.String())
			}
		}
	}
	emitPair(ch, "fast", metrics.ClientToPeer, fastToPeer)
	emitPair(ch, "fast", metrics.PeerToClient, fastToClient)
}

func emitPair(ch chan<- prometheus.Metric, path, direction string, n Counter) {
	ch <- prometheus.MustNewConstMetric(packetsDesc, prometheus.CounterValue, float64(n.Packets), path, direction)
	ch <- prometheus.MustNewConstMetric(bytesDesc, prometheus.CounterValue, float64(n.Bytes), path, direction)
}
