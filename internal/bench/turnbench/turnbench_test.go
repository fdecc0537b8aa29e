package turnbench

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/bench/benchtest"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

func namespaces(t *testing.T) string {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// A short run of two relays end to end: results, JSON with the documented
// fields, a PNG, and nothing left behind; with the relay isolated on its own
// core, also the relay-core figures.
func TestBenchSmoke(t *testing.T) {
	for _, isolate := range []bool{false, true} {
		t.Run(map[bool]string{false: "shared", true: "isolated"}[isolate], func(t *testing.T) { benchSmoke(t, isolate) })
	}
}

func benchSmoke(t *testing.T, isolate bool) {
	testenv.RequireRoot(t)
	dir, bin := t.TempDir(), testbed.SharedEbrtc(t)
	o := QuickOptions()
	o.Relays, o.Clients, o.Trial, o.Steps, o.CostRate = []string{"ebrtc-xdp", "baseline"}, 2, 300*time.Millisecond, 3, 5000
	o.Isolate = isolate
	rep, err := Run(context.Background(), bin, o)
	if err != nil {
		t.Fatal(err)
	}
	left := namespaces(t)
	for _, ns := range rep.Namespaces {
		if strings.Contains(left, ns) {
			t.Errorf("namespace %s left behind", ns)
		}
	}
	if len(rep.Relays) != 2 {
		t.Fatalf("%d relays in the report", len(rep.Relays))
	}
	for _, r := range rep.Relays {
		if r.MaxLossFreePPS < 10000 || r.LatencyP50us <= 0 || r.CPUNsPerPacket <= 0 || r.CostLoss > 0.01 {
			t.Errorf("%s: implausible result %+v", r.Name, r)
		}
		// Every relayed packet costs the relay core something (NAPI polls at least).
		if isolate != (r.RelayCoreNsPerPacket > 0 && r.OneCoreMaxLossFreePPS > 0 && r.OneCoreCapacityPPS > 0) {
			t.Errorf("%s: relay-core figures %v, %v, %v with isolation %v", r.Name, r.RelayCoreNsPerPacket, r.OneCoreMaxLossFreePPS, r.OneCoreCapacityPPS, isolate)
		}
		// Saturated, the in-kernel generator delivers more than the cost
		// trial's rate, and the relay's core works for it.
		if isolate && (r.SaturatedPPS < o.CostRate || r.SaturatedCoreNsPerPacket <= 0 || r.SaturatedCoreBusy <= 0.05) {
			t.Errorf("%s: saturated %v pkt/s, %v ns/pkt, core %v busy", r.Name, r.SaturatedPPS, r.SaturatedCoreNsPerPacket, r.SaturatedCoreBusy)
		}
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	if !strings.Contains(sb.String(), "ebrtc-xdp") || !strings.Contains(sb.String(), "targets:") {
		t.Errorf("table:\n%s", sb.String())
	}

	keys := []string{"name", "max_loss_free_pps", "cpu_ns_per_packet", "latency_p50_us", "latency_p99_us"}
	if isolate {
		keys = append(keys, "relay_core_ns_per_packet", "one_core_max_loss_free_pps", "one_core_capacity_pps",
			"saturated_core_ns_per_packet", "saturated_pps", "saturated_core_busy")
	}
	benchtest.CheckFiles(t, rep, dir, "relays", keys)
}

func TestSizesForMix(t *testing.T) {
	got := sizesFor(0, 4)
	if got[0] != 200 || got[1] != 1200 || got[2] != 200 || got[3] != 1200 {
		t.Fatalf("mix sizes %v", got)
	}
}
