package metrics

import "github.com/prometheus/client_golang/prometheus"

// Events counts what a TURN server refused or dropped, by reason, so that an
// attack (or a misconfigured client) shows up on a dashboard.
type Events struct {
	AuthFailures      *prometheus.CounterVec // reason
	ErrorResponses    *prometheus.CounterVec // method, code
	Dropped           *prometheus.CounterVec // reason: what user space dropped instead of relaying
	AllocationRefusal *prometheus.CounterVec // reason
	Redirects         prometheus.Counter     // Allocates sent to an alternate server
}

// NewEvents builds the counters (registered by Serve).
func NewEvents() *Events {
	return &Events{
		AuthFailures:      counterVec("ebrtc_turn_auth_failures_total", "Requests refused for their credentials, by reason.", "reason"),
		ErrorResponses:    counterVec("ebrtc_turn_error_responses_total", "STUN/TURN error responses sent, by method and error code.", "method", "code"),
		Dropped:           counterVec("ebrtc_turn_dropped_total", "Datagrams user space dropped instead of handling or relaying them, by reason.", "reason"),
		AllocationRefusal: counterVec("ebrtc_turn_allocations_refused_total", "Allocate requests refused by a quota or rate limit, by reason.", "reason"),
		Redirects: prometheus.NewCounter(prometheus.CounterOpts{Name: "ebrtc_turn_allocate_redirects_total",
			Help: "Allocate requests answered 300 Try Alternate: the server is over its shed-above-allocations load."}),
	}
}

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
}

// Collectors lists the counters for registration.
func (e *Events) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.AuthFailures, e.ErrorResponses, e.Dropped, e.AllocationRefusal, e.Redirects}
}

var (
	guardActiveDesc = prometheus.NewDesc("ebrtc_turn_source_guard_active",
		"1 when the socket filter dropping datagrams spoofed from the host's own addresses is loaded.", nil, nil)
	guardDroppedDesc = prometheus.NewDesc("ebrtc_turn_source_guard_dropped_total",
		"Datagrams dropped because their source was one of the host's addresses but they did not come from the host.", nil, nil)
)

// SourceGuardCollector exports the source guard's state and drops.
type SourceGuardCollector struct{ dropped func() (uint64, error) }

// NewSourceGuardCollector reads dropped at scrape time; nil: not loaded.
func NewSourceGuardCollector(dropped func() (uint64, error)) *SourceGuardCollector {
	return &SourceGuardCollector{dropped: dropped}
}

func (c *SourceGuardCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- guardActiveDesc
	ch <- guardDroppedDesc
}

func (c *SourceGuardCollector) Collect(ch chan<- prometheus.Metric) {
	if c.dropped == nil {
		ch <- prometheus.MustNewConstMetric(guardActiveDesc, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(guardActiveDesc, prometheus.GaugeValue, 1)
	n, err := c.dropped()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(guardDroppedDesc, err)
		return
	}
	ch <- prometheus.MustNewConstMetric(guardDroppedDesc, prometheus.CounterValue, float64(n))
}
