package afxdpbench

import (
	"context"
	"io"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/bench/benchtest"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// The AF_XDP benchmark, small: one round of each receiver with short
// trials, and the pion peers. Every figure is filled, the AF_XDP receiver
// ran in copy mode, the JSON has the fields, and the chart is a PNG.
func TestAFXDPBenchSmoke(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "taskset")
	dir, bin := t.TempDir(), testbed.SharedEbrtc(t)
	o := QuickOptions()
	o.Packets, o.Rounds, o.Blast, o.PionBytes, o.PionPackets, o.Isolate = 2000, 1, 300*time.Millisecond, 1<<20, 200, true
	rep, err := Run(context.Background(), bin, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Receivers) != 2 || len(rep.Pion) != 2 {
		t.Fatalf("%d receivers, %d pion results", len(rep.Receivers), len(rep.Pion))
	}
	for _, r := range rep.Receivers {
		if r.ReceiveP50Ns <= 0 || r.ReceiveP99Ns < r.ReceiveP50Ns || r.OneWayP50Ns < r.ReceiveP50Ns || r.PPS < 1000 ||
			r.Samples < o.Packets*9/10 || r.BatchPPS < 1000 || r.CoreNsPerDatagram <= 0 || r.BatchCoreNsPerDatagram <= 0 {
			t.Errorf("%s: implausible result %+v", r.Name, r)
		}
		if r.Name == "afxdp" && r.Mode != "copy" {
			t.Errorf("afxdp: mode %q, want copy (veth)", r.Mode)
		}
	}
	for _, p := range rep.Pion {
		if p.DataChannelMbps <= 0 || p.DataChannelBytes < o.PionBytes || p.RTPPacketsReceived < o.PionPackets*9/10 || p.RTPLatencyP50Ns <= 0 || p.Rounds != o.Rounds {
			t.Errorf("pion %s: implausible result %+v", p.Name, p)
		}
	}
	// The paced blast: the kernel socket's rate, every datagram counted
	// on one path or the other (the generator's count is what it sent).
	if b := rep.AtKernelRate; b.Rate != rep.Receivers[1].PPS || b.Sent <= 0 || b.Received == 0 || b.Received > uint64(b.Sent) {
		t.Errorf("blast at the kernel socket's rate: %+v (kernel blast %.0f/s)", b, rep.Receivers[1].PPS)
	}
	if rep.MedianRatio <= 0 {
		t.Errorf("no ratio")
	}
	// The senders: every path's blast arrived (99% at least, counted by the
	// client's UDP layer), without a checksum error.
	if len(rep.Senders) != len(txPaths) || rep.TXCoreRatio <= 0 {
		t.Errorf("senders %+v, core ratio %v", rep.Senders, rep.TXCoreRatio)
	}
	for _, s := range rep.Senders {
		if s.Sent < 1000 || s.Arrived > s.Sent || 100*s.Arrived < 99*s.Sent || s.ChecksumErrors != 0 || s.CoreNsPerDatagram <= 0 {
			t.Errorf("sender %s: implausible result %+v", s.Name, s)
		}
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	if !strings.Contains(sb.String(), "afxdp/kernel") || !strings.Contains(sb.String(), "pion receiver") || !strings.Contains(sb.String(), "batch reads") ||
		!strings.Contains(sb.String(), "transmit afxdp/sendmmsg") {
		t.Errorf("table:\n%s", sb.String())
	}
	benchtest.CheckFiles(t, rep, dir, "receivers", []string{"name", "receive_p50_ns", "receive_p99_ns", "pps"})
}

// BenchmarkReceive sends datagrams one at a time from the client
// namespace and reads each in the server namespace, through a kernel
// socket or an AF_XDP conn, in this process (not isolated: `ebrtc bench
// --afxdp` is the measurement). ns/op is a whole send and receive;
// receive-p50-ns and receive-p99-ns run from the frame's arrival (the
// classifier's stamp, or the kernel's SO_TIMESTAMPNS) to ReadFrom's return.
func BenchmarkReceive(b *testing.B) {
	testenv.RequireRoot(b)
	tb, err := testbed.New()
	if err != nil {
		b.Fatal(err)
	}
	defer tb.Close()
	addr := netip.AddrPortFrom(testbed.ServerClientIP4, 5006)
	for _, rx := range []string{"kernel", "afxdp"} {
		b.Run(rx, func(b *testing.B) {
			var read func([]byte) (int, uint64, error)
			var conn io.Closer
			err := tb.Server.Do(func() error {
				if rx == "kernel" {
					c, err := kernelProbeConn(addr.String())
					conn, read = c, kernelArrivals(c)
					return err
				}
				c, err := afxdp.Listen("udp4", addr.String())
				if err == nil {
					conn = c
					read = func(p []byte) (int, uint64, error) {
						n, _, arrival, err := c.ReadWithArrival(p)
						return n, arrival, err
					}
				}
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			s, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			payload, buf := make([]byte, 1200), make([]byte, 2048)
			samples := make([]uint32, 0, b.N)
			b.ResetTimer()
			for range b.N {
				if _, err := s.WriteToUDPAddrPort(payload, addr); err != nil {
					b.Fatal(err)
				}
				if _, arrival, err := read(buf); err != nil {
					b.Fatal(err)
				} else if arrival != 0 {
					samples = append(samples, clampNs(bench.MonotonicNs()-arrival))
				}
			}
			b.StopTimer()
			b.ReportMetric(bench.Quantile(samples, 0.5), "receive-p50-ns")
			b.ReportMetric(bench.Quantile(samples, 0.99), "receive-p99-ns")
		})
	}
}
