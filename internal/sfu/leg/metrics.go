package leg

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebrtc/ebrtc/internal/sfu/ratecontrol"
)

// Collector exports the legs' rate control and retransmissions. Per
// sender and receiver series only with labels "receiver" (like the TURN
// relay's per-user series, opt-in: a meeting of n has n(n-1) legs);
// otherwise summed.
type Collector struct {
	t        *Table
	perLeg   bool
	switches *prometheus.Desc
	resent   *prometheus.Desc
	legs     *prometheus.Desc
	target   *prometheus.Desc
	estimate *prometheus.Desc
}

// NewCollector collects t's legs; labels "receiver" adds per-leg series.
func NewCollector(t *Table, labels string) *Collector {
	c := &Collector{t: t, perLeg: labels == "receiver"}
	var leg []string
	if c.perLeg {
		leg = []string{"room", "sender", "receiver"}
	}
	c.switches = prometheus.NewDesc("ebrtc_sfu_layer_switches_total",
		"Decode target moves of receivers' video, by kind: first (the first estimate), down, up, pause (the lowest layer does not fit), resume.",
		append(leg, "kind"), nil)
	c.resent = prometheus.NewDesc("ebrtc_sfu_retransmissions_total",
		"Packets receivers NACKed, by what became of them: sent (from the SFU's history), asked (the sender, for what the SFU never got), not_owed (a layer the receiver does not get), paced (waited for room in its link's budget), repeated (NACKed again while waiting or within the round trip), superseded (given up for a key frame asked of the sender), doubled (of sent, sent a second time on a link losing packets at random); paced and repeated also count packets later sent or superseded.",
		append(leg, "result"), nil)
	c.legs = prometheus.NewDesc("ebrtc_sfu_legs",
		"Sender-to-receiver legs by the target their video gets: every (not adapted), a decode target, or paused.", []string{"target"}, nil)
	if c.perLeg {
		c.target = prometheus.NewDesc("ebrtc_sfu_leg_target",
			"The decode target a receiver gets of a sender's video: -1 every layer, -2 paused.", leg, nil)
		c.estimate = prometheus.NewDesc("ebrtc_sfu_link_estimate_bps",
			"A receiver's link estimate, bits/s, by source: twcc (the SFU's send-side estimate) or remb (the receiver's).",
			[]string{"room", "receiver", "source"}, nil)
	}
	return c
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.switches, c.resent, c.legs, c.target, c.estimate} {
		if d != nil {
			ch <- d
		}
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	switches, resent, legs := map[string]uint64{}, map[string]uint64{}, map[string]int{}
	links := map[[2]string]bool{}
	for _, st := range c.t.Status() {
		legs[targetLabel(st.Target)]++
		results := retransmissionResults(st.Retransmissions)
		if !c.perLeg {
			for k, v := range st.Switches {
				switches[k] += v
			}
			for k, v := range results {
				resent[k] += v
			}
			continue
		}
		labels := []string{st.Room, st.Sender, st.Receiver}
		for k, v := range st.Switches {
			ch <- prometheus.MustNewConstMetric(c.switches, prometheus.CounterValue, float64(v), append(labels, k)...)
		}
		for k, v := range results {
			ch <- prometheus.MustNewConstMetric(c.resent, prometheus.CounterValue, float64(v), append(labels, k)...)
		}
		ch <- prometheus.MustNewConstMetric(c.target, prometheus.GaugeValue, float64(st.Target), labels...)
		if key := [2]string{st.Room, st.Receiver}; st.Estimate > 0 && !links[key] {
			links[key] = true
			ch <- prometheus.MustNewConstMetric(c.estimate, prometheus.GaugeValue, st.Estimate, st.Room, st.Receiver, st.EstimateSource)
		}
	}
	if !c.perLeg {
		for _, k := range []string{"first", "down", "up", "pause", "resume"} {
			ch <- prometheus.MustNewConstMetric(c.switches, prometheus.CounterValue, float64(switches[k]), k)
		}
		for k, v := range resent {
			ch <- prometheus.MustNewConstMetric(c.resent, prometheus.CounterValue, float64(v), k)
		}
	}
	for k, v := range legs {
		ch <- prometheus.MustNewConstMetric(c.legs, prometheus.GaugeValue, float64(v), k)
	}
}

func retransmissionResults(r Retransmissions) map[string]uint64 {
	return map[string]uint64{"sent": r.Sent, "asked": r.Asked, "not_owed": r.NotOwed, "paced": r.Paced, "repeated": r.Repeated,
		"superseded": r.Superseded, "doubled": r.Doubled}
}

func targetLabel(t int) string {
	switch t {
	case ratecontrol.EveryLayer:
		return "every"
	case ratecontrol.Paused:
		return "paused"
	}
	return strconv.Itoa(t)
}
