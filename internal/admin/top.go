package admin

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Render writes one frame of `ebrtc top`: what cur shows, with rates over
// the time since prev (a snapshot of the same server; the zero Status for
// none yet, and then no rates).
func Render(w io.Writer, prev, cur Status) {
	r := rates{dt: cur.Time.Sub(prev.Time).Seconds(), same: prev.Pid == cur.Pid && !prev.Time.IsZero()}
	fmt.Fprintf(w, "ebrtc %s  pid %d  %s", cur.Server, cur.Pid, cur.Time.Format(time.DateTime))
	if r.ok() {
		fmt.Fprintf(w, "  rates over %.1fs", r.dt)
	}
	fmt.Fprintln(w)
	for _, i := range cur.Interfaces {
		fmt.Fprintf(w, "fast path on %s: %s (%s)\n", i.Name, i.Hooks, i.Reason)
	}
	if len(cur.Interfaces) == 0 && cur.Server != "sfu" {
		fmt.Fprintln(w, "fast path: off")
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "\tpackets/s\tbits/s\tpackets\tbytes\t")
	for _, row := range []struct {
		name      string
		prev, cur Counter
	}{
		{"fast to peer", prev.Fast.ToPeer, cur.Fast.ToPeer}, {"fast to client", prev.Fast.ToClient, cur.Fast.ToClient},
		{"slow to peer", prev.Slow.ToPeer, cur.Slow.ToPeer}, {"slow to client", prev.Slow.ToClient, cur.Slow.ToClient},
	} {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t\n", row.name, r.pps(row.prev, row.cur), r.bps(row.prev, row.cur), row.cur.Packets, row.cur.Bytes)
	}
	tw.Flush()
	renderReasons(w, r, prev.SlowReasons, cur.SlowReasons)
	renderUsers(w, r, prev.Users, cur.Users)
	renderAllocations(w, r, prev.Allocations, cur.Allocations)
	renderRooms(w, r, prev.Rooms, cur.Rooms)
	renderLegs(w, r, prev.Legs, cur.Legs)
}

// rates turns two counters into per-second figures; "-" without a
// previous snapshot of the same process.
type rates struct {
	dt   float64
	same bool
}

func (r rates) ok() bool { return r.same && r.dt > 0 }

func (r rates) pps(prev, cur Counter) string {
	if !r.ok() || cur.Packets < prev.Packets {
		return "-"
	}
	return human(float64(cur.Packets-prev.Packets)/r.dt, "")
}

func (r rates) bps(prev, cur Counter) string {
	if !r.ok() || cur.Bytes < prev.Bytes {
		return "-"
	}
	return human(8*float64(cur.Bytes-prev.Bytes)/r.dt, "")
}

// human prints 1234567 as 1.2M.
func human(v float64, unit string) string {
	for _, p := range []struct {
		div    float64
		suffix string
	}{{1e9, "G"}, {1e6, "M"}, {1e3, "k"}} {
		if v >= p.div {
			return fmt.Sprintf("%.1f%s%s", v/p.div, p.suffix, unit)
		}
	}
	return fmt.Sprintf("%.0f%s", v, unit)
}

func renderReasons(w io.Writer, r rates, prev, cur map[string]uint64) {
	if len(cur) == 0 {
		return
	}
	fmt.Fprint(w, "to the kernel (packets/s, total):")
	for _, name := range slices.Sorted(maps.Keys(cur)) {
		rate := "-"
		if r.ok() && cur[name] >= prev[name] {
			rate = human(float64(cur[name]-prev[name])/r.dt, "")
		}
		fmt.Fprintf(w, " %s %s/s (%d)", name, rate, cur[name])
	}
	fmt.Fprintln(w)
}

func renderUsers(w io.Writer, r rates, prev, cur []User) {
	if len(cur) == 0 {
		return
	}
	before := map[string]User{}
	for _, u := range prev {
		before[u.Name] = u
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "USER\tALLOCS\tFAST PPS\tFAST BPS\tSLOW PPS\tSLOW BPS\t")
	for _, u := range cur {
		p := before[u.Name]
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t\n", cmp.Or(u.Name, "(none)"), u.Allocations,
			r.pps(sum(p.Fast), sum(u.Fast)), r.bps(sum(p.Fast), sum(u.Fast)),
			r.pps(sum(p.Slow), sum(u.Slow)), r.bps(sum(p.Slow), sum(u.Slow)))
	}
	tw.Flush()
}

func sum(f Flow) Counter { return f.ToPeer.Add(f.ToClient) }

func renderAllocations(w io.Writer, r rates, prev, cur []Allocation) {
	if len(cur) == 0 {
		return
	}
	before := map[string]Allocation{}
	for _, a := range prev {
		before[a.Client.String()+a.Relay.String()] = a
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLIENT\tRELAY\tUSER\tCHANNEL\tPEER\tPATH\tPPS TO PEER\tBPS TO PEER\tPPS TO CLIENT\tBPS TO CLIENT\t")
	for _, a := range cur {
		p := before[a.Client.String()+a.Relay.String()]
		row := func(channel, peer, path string, prev, cur Flow) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", a.Client, a.Relay, cmp.Or(a.User, "-"), channel, peer, path,
				r.pps(prev.ToPeer, cur.ToPeer), r.bps(prev.ToPeer, cur.ToPeer), r.pps(prev.ToClient, cur.ToClient), r.bps(prev.ToClient, cur.ToClient))
		}
		row("-", "-", "slow", p.Slow, a.Slow)
		for _, c := range a.Channels {
			path := "slow"
			if c.Offload {
				path = "fast"
			}
			pc := Channel{}
			for _, old := range p.Channels {
				if old.Number == c.Number {
					pc = old
				}
			}
			row(fmt.Sprintf("%#x", c.Number), c.Peer.String(), path, pc.Fast, c.Fast)
		}
	}
	tw.Flush()
}

func renderRooms(w io.Writer, r rates, prev, cur []Room) {
	if len(cur) == 0 {
		return
	}
	before := map[string]Participant{}
	for _, room := range prev {
		for _, p := range room.Participants {
			before[room.Name+"/"+p.ID] = p
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROOM\tPARTICIPANT\tNAME\tPUBLISHES\tOFF\tRECEIVERS\tRECEIVES\tSENT PPS\tSENT BPS\tFORWARDED PPS\tFORWARDED BPS\t")
	for _, room := range cur {
		for _, p := range room.Participants {
			pub := "-"
			switch {
			case p.Publishes.IsValid():
				pub = p.Publishes.String()
			case p.Viewer:
				pub = "(viewer)"
			}
			if p.Screen.IsValid() {
				pub += " +screen"
			}
			off := strings.Join(p.Muted, ",")
			b := before[room.Name+"/"+p.ID]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t\n", room.Name, p.ID, cmp.Or(p.Name, "-"), pub, cmp.Or(off, "-"), p.Receivers, p.Receives,
				r.pps(b.Sent, p.Sent), r.bps(b.Sent, p.Sent), r.pps(b.Forwarded, p.Forwarded), r.bps(b.Forwarded, p.Forwarded))
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "%d rooms, %d participants\n", len(cur), participants(cur))
}

// renderLegs shows each receiver's leg of each sender: what it gets, at
// how many frames a second, its link's estimate, the retransmissions the
// SFU answered (and asked the sender for), and why its target last moved.
func renderLegs(w io.Writer, r rates, prev, cur []Leg) {
	if len(cur) == 0 {
		return
	}
	before := map[string]Leg{}
	for _, l := range prev {
		before[l.Room+"/"+l.Sender+"/"+l.Receiver] = l
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROOM\tSENDER\tRECEIVER\tTARGET\tFPS\tBPS\tESTIMATE\tRETRANSMITTED\tASKED SENDER\tWHY\t")
	for _, l := range cur {
		b := before[l.Room+"/"+l.Sender+"/"+l.Receiver]
		fps := "-"
		if r.ok() && l.Frames >= b.Frames {
			fps = fmt.Sprintf("%.1f", float64(l.Frames-b.Frames)/r.dt)
		}
		est := "no limit"
		if l.EstimateBPS > 0 {
			est = human(l.EstimateBPS, "") + " (" + l.EstimateSource + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t\n", l.Room, l.Sender, l.Receiver, l.Target, fps,
			r.bps(b.Sent, l.Sent), est, l.Retransmitted, l.AskedSender, cmp.Or(l.Reason, "-"))
	}
	tw.Flush()
}

func participants(rooms []Room) int {
	n := 0
	for _, r := range rooms {
		n += len(r.Participants)
	}
	return n
}

// ClearScreen starts a frame at the top of a terminal.
const ClearScreen = "\x1b[H\x1b[2J"
