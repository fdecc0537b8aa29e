package afxdp

import "github.com/prometheus/client_golang/prometheus"

var (
	afxdpDatagramsDesc = prometheus.NewDesc("ebrtc_afxdp_datagrams_total",
		"Datagrams an AF_XDP conn (--rx afxdp) returned to the server, by local address and path: xdp (through the AF_XDP socket) or kernel (what the classifier left to the kernel socket).",
		[]string{"addr", "path"}, nil)
	afxdpDroppedDesc = prometheus.NewDesc("ebrtc_afxdp_dropped_total",
		"Datagrams an AF_XDP conn dropped, by local address and reason: bad_checksum (as the kernel would), malformed, kernel_dropped (the AF_XDP socket's own drop counter).",
		[]string{"addr", "reason"}, nil)
	afxdpOutcomesDesc = prometheus.NewDesc("ebrtc_afxdp_outcome_packets_total",
		"The XDP classifier's verdicts on the datagrams for a conn (its local address), by outcome (redirect, or why it passed them to the kernel socket).",
		[]string{"addr", "outcome"}, nil)
	afxdpSentDesc = prometheus.NewDesc("ebrtc_afxdp_sent_total",
		"Datagrams an AF_XDP conn sent with WriteBatch, by local address and path: xdp (its AF_XDP socket's TX ring), or why the kernel socket sent it (route, neighbour, confirm, interface, egress, too_long, ring_full, socket_options).",
		[]string{"addr", "path"}, nil)
)

// Collector exports the counters of AF_XDP conns to Prometheus.
type Collector struct {
	conns []*Conn
}

// NewCollector exports conns' counters.
func NewCollector(conns []*Conn) *Collector { return &Collector{conns: conns} }

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- afxdpDatagramsDesc
	ch <- afxdpDroppedDesc
	ch <- afxdpOutcomesDesc
	ch <- afxdpSentDesc
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, conn := range c.conns {
		st, err := conn.Stats()
		if err != nil {
			ch <- prometheus.NewInvalidMetric(afxdpDatagramsDesc, err)
			continue
		}
		addr := conn.LocalAddr().String()
		counter := func(d *prometheus.Desc, v uint64, label string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), addr, label)
		}
		counter(afxdpDatagramsDesc, st.ViaXDP, "xdp")
		counter(afxdpDatagramsDesc, st.ViaKernel, "kernel")
		counter(afxdpDroppedDesc, st.BadChecksum, "bad_checksum")
		counter(afxdpDroppedDesc, st.Malformed, "malformed")
		counter(afxdpDroppedDesc, st.Sockets.RxDropped, "kernel_dropped")
		for name, o := range st.Outcomes {
			counter(afxdpOutcomesDesc, o.Packets, name)
		}
		counter(afxdpSentDesc, st.Sent.ViaXDP, "xdp")
		for why, n := range st.Sent.ViaKernel {
			counter(afxdpSentDesc, n, why)
		}
	}
}
