package sfubench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

// RoomResult is one large meeting on ebrtc sfu's eBPF data plane:
// everyone publishing the captured stream (audio and video), every
// receiver getting everyone's video (LastN 0) or only its LastN most
// recent speakers' (the others paused in the data plane, audio always).
type RoomResult struct {
	Participants int `json:"participants"`
	LastN        int `json:"last_n"`
	// ReplicasPPS is what the SFU sent a second; PausedPPS what it left
	// out for last-N (its layer_dropped and gated outcomes).
	ReplicasPPS float64 `json:"replicas_pps"`
	PausedPPS   float64 `json:"paused_pps"`
	// ReplicaBPS is the replicas' bits a second (UDP payload): video's
	// packets are several times audio's.
	ReplicaBPS float64 `json:"replica_bps"`
	// InPPS is what the publishers sent it a second.
	InPPS float64 `json:"in_pps"`
	// RelayCoreBusy is the share of the SFU's core it kept busy (its
	// process and its interfaces' NAPI threads, pinned; 0 not isolated).
	RelayCoreBusy float64 `json:"relay_core_busy"`
	Loss          float64 `json:"loss"`
}

// roomPace is the room's participants' pace, of the captured stream's.
const roomPace = 0.5

// roomSelected says whether the run includes the room (--sfus all, or
// naming "room"), and the names without it.
func roomSelected(names []string) (bool, []string) {
	var rest []string
	room := len(names) == 0
	for _, n := range names {
		switch n {
		case "room":
			room = true
		case "all", "":
			room = true
			rest = append(rest, n)
		default:
			rest = append(rest, n)
		}
	}
	return room, rest
}

// roomTrials measures the room with every video and with LastN.
func roomTrials(e *env, rec *synth.Recording, o Options) ([]RoomResult, error) {
	var out []RoomResult
	for _, lastN := range []int{0, o.LastN} {
		r, err := roomTrial(e, rec, o, lastN)
		if err != nil {
			return nil, fmt.Errorf("room of %d, last-n %d: %w", o.Room, lastN, err)
		}
		progress(o, "room %3d last-n %2d: %.0f replicas/s (%.0f paused), relay core %3.0f%% busy, loss %.3f%%",
			o.Room, lastN, r.ReplicasPPS, r.PausedPPS, 100*r.RelayCoreBusy, 100*r.Loss)
		out = append(out, *r)
	}
	return out, nil
}

func roomTrial(e *env, rec *synth.Recording, o Options, lastN int) (*RoomResult, error) {
	s := SFU{Name: "ebrtc-sfu-ebpf-room-" + strconv.Itoa(lastN), plane: "ebpf", lastN: lastN}
	sut, err := startPinnedSFU(e, s)
	if err != nil {
		return nil, err
	}
	defer sut.stop()
	lt, err := bench.NewLiveTraffic(e.Testbed)
	if err != nil {
		return nil, err
	}
	defer lt.Close()
	ctx, stop := context.WithCancel(e.Ctx)
	var sending sync.WaitGroup
	room := o
	// At half the captured pace: every video of a room of 50 at full pace
	// is 200,000 replicas a second, past what this 2-CPU testbed's
	// receiving veths take (about 130,000: the rest fail to clone, and
	// the drops, not the SFU, would be measured).
	room.MeetingSize, room.RampStep, room.MeetingPace = o.Room, o.RoomTrial, roomPace
	// The participants spread over the hosts (a veth each): one veth's
	// ring would drop what a room's every receiver gets.
	m, err := startMeeting(ctx, e, func(i int) synth.Config { return sut.config(e, i, "room") }, func(i int) int { return i }, rec, room, 0, lt, &sending)
	if err != nil {
		stop()
		return nil, err
	}
	defer func() {
		stop()
		sending.Wait()
		m.leave()
	}()
	time.Sleep(3 * time.Second) // key frames in, speakers ranked, last-N applied
	paused := func() float64 {
		mt, err := sut.metrics()
		if err != nil {
			return 0
		}
		return mt.SFUOutcome(dataplane.LayerDropped.String()) + mt.SFUOutcome(dataplane.Gated.String())
	}
	replicas0, err := sut.sentReplicas()
	if err != nil {
		return nil, err
	}
	in0, _, _ := rampSent([]*meeting{m})
	replicaBytes := func() float64 {
		mt, err := sut.metrics()
		if err != nil {
			return 0
		}
		return mt[fmt.Sprintf(`ebrtc_sfu_bytes_total{outcome=%q}`, dataplane.Replica.String())]
	}
	paused0, start, outcomes0, bytes0 := paused(), time.Now(), sut.outcomes(), replicaBytes()
	// rampStep's loss counts what was left out on purpose as not owed
	// only for an adapted SFU: this one is (last-N).
	sut.adapted = true
	step, err := rampStep(e, lt, []*meeting{m}, room, sut)
	if err != nil {
		return nil, err
	}
	secs := time.Since(start).Seconds()
	replicas1, err := sut.sentReplicas()
	if err != nil {
		return nil, err
	}
	in1, _, _ := rampSent([]*meeting{m})
	if o.Log != nil {
		fmt.Fprintf(o.Log, "room %d last-n %d: outcomes over the trial %v\n", o.Room, lastN, outcomesSince(outcomes0, sut.outcomes()))
	}
	return &RoomResult{Participants: o.Room, LastN: lastN, ReplicasPPS: float64(replicas1-replicas0) / secs,
		PausedPPS: (paused() - paused0) / secs, ReplicaBPS: 8 * (replicaBytes() - bytes0) / secs, InPPS: float64(in1-in0) / secs, RelayCoreBusy: step.RelayCoreBusy, Loss: step.Loss}, nil
}

// writeRooms prints the room's results and their ratio.
func writeRooms(w io.Writer, rooms []RoomResult) {
	if len(rooms) == 0 {
		return
	}
	fmt.Fprintf(w, "a room of %d on ebrtc-sfu-ebpf, everyone publishing:\n", rooms[0].Participants)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "last-n\tin pkts/s\treplicas/s\treplicas Mbit/s\tpaused/s\trelay core busy\tloss\t")
	for _, r := range rooms {
		n := strconv.Itoa(r.LastN)
		if r.LastN == 0 {
			n = "all"
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f%%\t%.3f%%\t\n", n, r.InPPS, r.ReplicasPPS, r.ReplicaBPS/1e6, r.PausedPPS, 100*r.RelayCoreBusy, 100*r.Loss)
	}
	tw.Flush()
	if len(rooms) == 2 && rooms[1].ReplicasPPS > 0 {
		fmt.Fprintf(w, "  all / last-n %d: %.2fx the replicas, %.2fx their bits", rooms[1].LastN, rooms[0].ReplicasPPS/rooms[1].ReplicasPPS,
			rooms[0].ReplicaBPS/max(rooms[1].ReplicaBPS, 1))
		if rooms[1].RelayCoreBusy > 0 {
			fmt.Fprintf(w, ", %.2fx the relay core's time", rooms[0].RelayCoreBusy/rooms[1].RelayCoreBusy)
		}
		fmt.Fprintln(w)
	}
}
