package sfu

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebrtc/ebrtc/internal/sfu/controller"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
)

var (
	sfuPlaneDesc = prometheus.NewDesc("ebrtc_sfu_dataplane",
		"1 for the data plane forwarding media: ebpf (TC ingress) or user (recvmmsg/sendmmsg).", []string{"mode"}, nil)
	sfuRoomsDesc        = prometheus.NewDesc("ebrtc_sfu_rooms", "Rooms with at least one participant.", nil, nil)
	sfuParticipantsDesc = prometheus.NewDesc("ebrtc_sfu_participants", "Participants, by room.", []string{"room"}, nil)
	sfuDatagramsDesc    = prometheus.NewDesc("ebrtc_sfu_datagrams_total",
		"Datagrams on the media ports, by what the data plane did (replica: one per receiver).", []string{"outcome"}, nil)
	sfuBytesDesc = prometheus.NewDesc("ebrtc_sfu_bytes_total",
		"UDP payload bytes on the media ports, by what the data plane did.", []string{"outcome"}, nil)
	sfuSenderPacketsDesc = prometheus.NewDesc("ebrtc_sfu_sender_packets_total",
		"RTP and RTCP sender reports a participant sent into the data plane, by room and sender.", []string{"room", "sender"}, nil)
	sfuSenderBytesDesc = prometheus.NewDesc("ebrtc_sfu_sender_bytes_total",
		"UDP payload bytes a participant sent into the data plane.", []string{"room", "sender"}, nil)
	sfuReceiverPacketsDesc = prometheus.NewDesc("ebrtc_sfu_receiver_packets_total",
		"Replicas of a sender's stream sent to a receiver.", []string{"room", "sender", "receiver"}, nil)
	sfuReceiverBytesDesc = prometheus.NewDesc("ebrtc_sfu_receiver_bytes_total",
		"UDP payload bytes of a sender's stream sent to a receiver.", []string{"room", "sender", "receiver"}, nil)
	sfuWaitingDesc = prometheus.NewDesc("ebrtc_sfu_receiver_waiting_key_frame",
		"1 while a receiver waits for the sender's next key frame (its video is held back).", []string{"room", "sender", "receiver"}, nil)
	sfuWorkerDatagramsDesc = prometheus.NewDesc("ebrtc_sfu_worker_datagrams_total",
		"Datagrams each of the user data plane's reading goroutines took (a media socket, or a worker's socket of its SO_REUSEPORT group: --workers).", []string{"worker"}, nil)
)

// Collector reads the SFU's rooms from the controller and its counters
// from the data plane at scrape time.
type Collector struct {
	mode  string
	plane dataplane.Plane
	ctrl  *controller.Controller
}

// NewCollector builds the collector; mode names the data plane.
func NewCollector(mode string, plane dataplane.Plane, ctrl *controller.Controller) *Collector {
	return &Collector{mode: mode, plane: plane, ctrl: ctrl}
}

func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{sfuPlaneDesc, sfuRoomsDesc, sfuParticipantsDesc, sfuDatagramsDesc, sfuBytesDesc,
		sfuSenderPacketsDesc, sfuSenderBytesDesc, sfuReceiverPacketsDesc, sfuReceiverBytesDesc, sfuWaitingDesc, sfuWorkerDatagramsDesc} {
		ch <- d
	}
}

func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(sfuPlaneDesc, prometheus.GaugeValue, 1, c.mode)
	rooms := c.ctrl.Rooms()
	ch <- prometheus.MustNewConstMetric(sfuRoomsDesc, prometheus.GaugeValue, float64(len(rooms)))
	for name, n := range rooms {
		ch <- prometheus.MustNewConstMetric(sfuParticipantsDesc, prometheus.GaugeValue, float64(n), name)
	}
	outcomes, err := c.plane.Outcomes()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(sfuDatagramsDesc, err)
	}
	for o, n := range outcomes {
		ch <- prometheus.MustNewConstMetric(sfuDatagramsDesc, prometheus.CounterValue, float64(n.Packets), o.String())
		ch <- prometheus.MustNewConstMetric(sfuBytesDesc, prometheus.CounterValue, float64(n.Bytes), o.String())
	}
	if w, ok := c.plane.(interface{ WorkerReads() []uint64 }); ok {
		for i, n := range w.WorkerReads() {
			ch <- prometheus.MustNewConstMetric(sfuWorkerDatagramsDesc, prometheus.CounterValue, float64(n), strconv.Itoa(i))
		}
	}
	for _, s := range c.ctrl.Streams() {
		st, err := c.plane.StreamStats(s.From)
		if err != nil {
			continue // not installed yet (no receiver bound), or gone since
		}
		ch <- prometheus.MustNewConstMetric(sfuSenderPacketsDesc, prometheus.CounterValue, float64(st.In.Packets), s.Room, s.Sender)
		ch <- prometheus.MustNewConstMetric(sfuSenderBytesDesc, prometheus.CounterValue, float64(st.In.Bytes), s.Room, s.Sender)
		for _, r := range st.Out {
			id, ok := s.Receivers[r.To]
			if !ok {
				continue
			}
			ch <- prometheus.MustNewConstMetric(sfuReceiverPacketsDesc, prometheus.CounterValue, float64(r.Packets), s.Room, s.Sender, id)
			ch <- prometheus.MustNewConstMetric(sfuReceiverBytesDesc, prometheus.CounterValue, float64(r.Bytes), s.Room, s.Sender, id)
			ch <- prometheus.MustNewConstMetric(sfuWaitingDesc, prometheus.GaugeValue, boolGauge(r.Waiting), s.Room, s.Sender, id)
		}
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
