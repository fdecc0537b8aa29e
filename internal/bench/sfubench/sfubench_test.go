package sfubench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/bench/benchtest"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The SFU benchmark, small: both data planes and Janus, 4 receivers on 2 hosts, short trials,
// a ramp of two 3-party meetings. Every figure is filled, the JSON has
// the fields, and the chart is a PNG.
func TestSFUBenchSmoke(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, "ethtool")
	testenv.RequireCommand(t, "janus")
	dir, bin := t.TempDir(), testbed.SharedEbrtc(t)
	o := QuickOptions()
	o.Fanout, o.Trial, o.Steps, o.MeetingSize, o.RampStep, o.RampMax = 4, 300*time.Millisecond, 2, 3, 500*time.Millisecond, 3
	o.Isolate, o.Hosts, o.SaturationTrial = true, 2, 500*time.Millisecond
	o.Room, o.LastN, o.RoomTrial = 6, 2, 500*time.Millisecond
	o.Progress = testWriter{t}
	rep, err := Run(context.Background(), bin, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.SFUs) != len(SFUs()) {
		t.Fatalf("%d SFUs in the report", len(rep.SFUs))
	}
	for _, s := range rep.SFUs {
		if s.RelayCoreNsPerReplica <= 0 || s.SaturatedReplicasPPS < 1000 || s.OneCoreMaxLossFreeReplicasPPS < 1000 ||
			s.SkewP50us <= 0 || len(s.Ramp) == 0 || !slices.Contains([]string{"max", "jitter", "loss", "generator"}, s.RampEnded) ||
			s.SkewP99us < s.SkewP50us || s.RelayCoreNsPerReplicaAtMax <= 0 || s.ParticipantsPerCore <= 0 {
			t.Errorf("%s: implausible result %+v", s.Name, s)
		}
	}
	// The room: with last-N 2 of 5 others, each receiver's video from 3
	// publishers is left out, and fewer replicas go.
	if len(rep.Rooms) != 2 || rep.Rooms[0].LastN != 0 || rep.Rooms[1].LastN != 2 || rep.Rooms[1].PausedPPS <= 0 ||
		rep.Rooms[1].ReplicasPPS >= rep.Rooms[0].ReplicasPPS || rep.Rooms[1].ReplicaBPS >= rep.Rooms[0].ReplicaBPS {
		t.Errorf("rooms: %+v", rep.Rooms)
	}
	var sb strings.Builder
	rep.WriteTable(&sb)
	if !strings.Contains(sb.String(), "ebrtc-sfu-ebpf") || !strings.Contains(sb.String(), "janus") ||
		!strings.Contains(sb.String(), "participants") || !strings.Contains(sb.String(), "a room of 6") {
		t.Errorf("table:\n%s", sb.String())
	}
	benchtest.CheckFiles(t, rep, dir, "sfus", []string{"name", "relay_core_ns_per_replica", "one_core_max_loss_free_replicas_pps",
		"participants_per_core"})
}

// The ramp ends on the generator when it fell behind, unless the SFU's
// core was saturated; single late packets end nothing.
func TestRampVerdict(t *testing.T) {
	o := QuickOptions()
	for _, c := range []struct {
		step RampStep
		want string
	}{
		{RampStep{LateShare: 0.0005, RelayCoreBusy: 0.3}, ""},
		{RampStep{LateShare: 0.01, Loss: 0.01, RelayCoreBusy: 0.3}, "generator"},
		{RampStep{LateShare: 0.01, Loss: 0.01, RelayCoreBusy: 0.99}, "loss"},
		{RampStep{LateShare: 0.01, JitterP99ms: 50, Loss: 0.01, RelayCoreBusy: 0.99}, "jitter"},
		{RampStep{JitterP99ms: 50, RelayCoreBusy: 0.3}, "jitter"},
		{RampStep{Loss: 0.002, RelayCoreBusy: 0.3}, "loss"},
	} {
		if got := rampVerdict(c.step, o); got != c.want {
			t.Errorf("%+v: %q, want %q", c.step, got, c.want)
		}
	}
}

// testWriter logs what the benchmark says of its progress.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
