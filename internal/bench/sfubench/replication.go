package sfubench

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/pion/rtp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/sfu/dd"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testbed/synth"
)

// replicationTrials: one publisher, o.Fanout receivers.
func replicationTrials(e *env, rec *synth.Recording, o Options, res *SFUResult, sut *sfuUnderTest) error {
	sentReplicas := sut.sentReplicas
	cfg := sut.config(e, 0, "replication")
	cfg.RecordArrivals = true
	var m meeting
	defer m.leave()
	pub, err := synth.Join(cfg)
	if err != nil {
		return err
	}
	m.parts = append(m.parts, pub)
	stream := rec.NewStream(0)
	if err := pub.Publish(stream); err != nil {
		return err
	}
	var receivers []*synth.Participant
	for i := range o.Fanout {
		cfg := sut.config(e, i, "replication")
		cfg.RecordArrivals = true
		p, err := synth.Join(cfg)
		if err != nil {
			return err
		}
		m.parts = append(m.parts, p)
		receivers = append(receivers, p)
	}
	if err := synth.AwaitStreams(receivers, 1, 30*time.Second); err != nil {
		return err
	}
	// The skew trial first, at the stream's own pace: its first packets
	// carry the key frame that lets the receivers' video in.
	skewPackets := len(rec.Packets) / 6 // about 2 s
	if _, err := pub.Send(e.Ctx, 0, skewPackets, 1); err != nil {
		return err
	}
	time.Sleep(200 * time.Millisecond)
	// Skew over the receivers on the first host (every len(hosts)-th
	// receiver, so the first replica to the nearly last): one far NAPI
	// thread takes them in order, and the other hosts' wakeups stay out.
	var sampled []*synth.Participant
	for i := 0; i < len(receivers); i += len(e.hosts) {
		sampled = append(sampled, receivers[i])
	}
	if len(sampled) < 2 { // too few receivers to spread: all of them
		sampled = receivers
	}
	res.SkewP50us, res.SkewP99us = skew(stream, sampled, pub.ID, skewPackets)
	progress(o, "%-15s skew over %d of %d receivers (the first host's): p50 %.0f µs, p99 %.0f µs", res.Name, len(sampled), o.Fanout,
		res.SkewP50us, res.SkewP99us)

	// The later trials count replicas at the client's veth (tc_sink), as
	// the receivers' sockets could not keep up.
	tmpl, size, err := replicaTemplate(e.Testbed, pub, stream, skewPackets)
	if err != nil {
		return err
	}
	ports := map[netip.AddrPort]uint16{}
	for i, p := range receivers {
		ports[netip.AddrPortFrom(e.hostIP(i), p.Incoming()[pub.ID].Port())] = sut.replicaLength(size)
	}
	if e.Isolated() && !sut.encrypted {
		progress(o, "%-15s saturation trial: in-kernel generator, one %d-byte AV1 packet to %d receivers", res.Name, size, o.Fanout)
		before, err := sentReplicas()
		if err != nil {
			return err
		}
		// Numbered: the SFU drops a repeated sequence number as a duplicate.
		// The template keeps the next number unused, for the paced trials.
		seqAt := len(tmpl) - size + 2
		first := binary.BigEndian.Uint16(tmpl[seqAt:])
		number := &bench.FrameNumber{At: uint32(seqAt), UDPChecksumAt: uint32(len(tmpl) - size - 2), First: first}
		sat, err := e.Saturate([]*bench.LiveSender{{NS: e.Testbed.Client, Iface: testbed.ClientIface, Frames: [][]byte{tmpl}, Number: number}}, ports,
			o.saturationTrial())
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint16(tmpl[seqAt:], sat.NextNumber)
		after, err := sentReplicas()
		if err != nil {
			return err
		}
		res.SaturatedBy = "in-kernel generator"
		res.SaturatedReplicasPPS = float64(after-before) / sat.Duration.Seconds()
		res.SaturatedDeliveredPPS = float64(sat.Delivered) / sat.Duration.Seconds()
		if after > before {
			res.RelayCoreNsPerReplica = float64(sat.RelayNs) / float64(after-before)
		}
		res.SaturatedCoreBusy = float64(sat.RelayNs) / float64(sat.Duration.Nanoseconds())
		progress(o, "%-15s saturated: %.0f replicas/s sent (%.0f delivered), core %.0f%% busy, %.0f ns/replica", res.Name,
			res.SaturatedReplicasPPS, res.SaturatedDeliveredPPS, 100*res.SaturatedCoreBusy, res.RelayCoreNsPerReplica)
	}
	return searchReplicas(e, pub, tmpl[len(tmpl)-size:], ports, o, res, sut)
}

// skew is the first-to-last spread of each RTP packet's arrival over the
// receivers, in µs: p50 and p99 over the packets every receiver got.
func skew(stream *synth.Stream, receivers []*synth.Participant, pubID string, packets int) (p50, p99 float64) {
	var spreads []float64
	streams := make([]*synth.Incoming, len(receivers))
	for i, r := range receivers {
		streams[i] = r.Incoming()[pubID]
	}
	for k := range packets {
		b, _, err := stream.Packet(k)
		if err != nil {
			continue
		}
		key, ok := synth.PayloadKey(b)
		if !ok || binary.BigEndian.Uint32(b[8:]) != stream.VideoSSRC {
			continue // audio payloads repeat (silence): video's tell packets apart
		}
		var first, last time.Time
		all := true
		for _, in := range streams {
			t, ok := in.Arrival(key)
			if !ok {
				all = false
				break
			}
			if first.IsZero() || t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
		if all {
			spreads = append(spreads, float64(last.Sub(first).Nanoseconds())/1000)
		}
	}
	return bench.Quantile(spreads, 0.5), bench.Quantile(spreads, 0.99)
}

// replicaTemplate is one of the stream's AV1 packets that starts no key
// frame and is in every decode target (a T0 frame's: a receiver adapted
// to the lowest temporal layer gets it too, renumbered), as a frame from
// the publisher's address to the SFU, and its UDP payload length.
func replicaTemplate(tb *testbed.Testbed, pub *synth.Participant, stream *synth.Stream, from int) ([]byte, int, error) {
	conn, sfu := pub.Publishing()
	src := netip.AddrPortFrom(testbed.ClientIP4, conn.LocalAddr().(*net.UDPAddr).AddrPort().Port()) // the socket is bound to 0.0.0.0
	cliMAC, err1 := bench.IfaceMAC(tb.Client, testbed.ClientIface)
	srvMAC, err2 := bench.IfaceMAC(tb.Server, testbed.ServerCliIface)
	if err := errors.Join(err1, err2); err != nil {
		return nil, 0, err
	}
	var structure *dd.Structure
	for k := 0; k < from+1000; k++ {
		b, _, err := stream.Packet(k)
		if err != nil {
			return nil, 0, err
		}
		var h rtp.Header
		if _, err := h.Unmarshal(b); err != nil || h.SSRC != stream.VideoSSRC {
			continue
		}
		desc, err := dd.Parse(h.GetExtension(synth.DDExtensionID), structure)
		if err != nil {
			continue
		}
		if desc.Structure != nil {
			structure = desc.Structure
			continue
		}
		dtis, err := desc.DTIs(structure)
		if k < from || err != nil || slices.Contains(dtis, dd.NotPresent) || len(b) <= 800 || b[0]&0x20 != 0 {
			continue
		}
		f := frame.UDP{SrcMAC: cliMAC, DstMAC: srvMAC, Src: src, Dst: sfu, TTL: 64, DF: true, Payload: b}.Marshal()
		return f, len(b), nil
	}
	return nil, 0, errors.New("no AV1 packet of a T0 frame over 800 bytes in the capture")
}

// searchReplicas finds the highest paced input rate the SFU replicates
// with loss at most o.MaxLoss (doubling, then bisecting). Loss is what
// the SFU did not send of sent x fanout: what the testbed's far end then
// drops (one veth ring, 256 frames, for every receiver) is reported
// beside it, not charged to the SFU. Encrypted, the publisher seals each
// datagram after numbering it, and the trial with loss that replicated
// the most is the saturated figure (the in-kernel generator cannot seal).
func searchReplicas(e *env, pub *synth.Participant, payload []byte, ports map[netip.AddrPort]uint16, o Options, res *SFUResult,
	sut *sfuUnderTest) error {
	sentReplicas, dropped, outcomes := sut.sentReplicas, sut.layersDropped, sut.outcomes
	lt, err := bench.NewLiveTraffic(e.Testbed)
	if err != nil {
		return err
	}
	defer lt.Close()
	if err := lt.Sink(ports); err != nil {
		return err
	}
	conn, sfu := pub.Publishing()
	fanout := float64(len(ports))
	// A rate whose loss is within o.MaxLoss passes: the SFU replicated it.
	var last *pacedResult // the last trial without loss
	var lastReplicated uint64
	trial := func(rate float64) (bool, bool, error) {
		outBefore := outcomes()
		before, err1 := sentReplicas()
		droppedBefore, err2 := dropped()
		if err := errors.Join(err1, err2); err != nil {
			return false, false, err
		}
		var seal func(dst, b []byte) ([]byte, error)
		if sut.encrypted {
			seal = pub.Seal
		}
		t, err := pacedTrial(e, lt, conn, sfu, payload, seal, rate, o.Trial)
		if err != nil {
			return false, false, err
		}
		after, err1 := sentReplicas()
		droppedAfter, err2 := dropped()
		if err := errors.Join(err1, err2); err != nil {
			return false, false, err
		}
		replicated := after - before
		// Replicas left out on purpose (adapted receivers: under the
		// trial's rate their links pause even the lowest layer) are not
		// lost.
		loss := 1 - float64(replicated+droppedAfter-droppedBefore)/(float64(t.sent)*fanout)
		farLoss := 1 - float64(t.delivered)/float64(max(replicated, 1))
		limited := float64(t.sent) < 0.97*rate*o.Trial.Seconds()
		progress(o, "%-15s %8.0f packets/s in: %9.0f replicas/s out, loss %.3f%% (then %.3f%% at the far end)%s", res.Name, rate,
			float64(replicated)/t.duration.Seconds(), 100*max(0, loss), 100*max(0, farLoss), map[bool]string{true: " (sender short)", false: ""}[limited])
		if loss > o.MaxLoss {
			progress(o, "%-15s what the data plane did with the trial's datagrams: %v", res.Name, outcomesSince(outBefore, outcomes()))
			if sut.encrypted && float64(replicated)/t.duration.Seconds() > res.SaturatedReplicasPPS {
				saturatedBy(res, "paced sender, sealed", t, replicated)
			}
			return false, false, nil
		}
		if replicas := float64(replicated) / t.duration.Seconds(); replicas > res.OneCoreMaxLossFreeReplicasPPS {
			res.OneCoreMaxLossFreeReplicasPPS = replicas
			res.GeneratorLimited = limited
			res.FarEndLossAtMax = max(0, farLoss)
			if replicated > 0 {
				res.RelayCoreNsPerReplicaAtMax = float64(t.relayNs) / float64(replicated)
			}
		}
		last, lastReplicated = t, replicated
		return true, limited, nil // a sender short of the rate cannot show a higher one
	}
	if err := bench.RateSearch(e.Ctx, o.StartRate, o.MaxRate, o.Steps, trial); err != nil {
		return err
	}
	if sut.encrypted && res.SaturatedBy == "" {
		// No trial of the search saturated it: one more as fast as the
		// sender seals and sends (sender short, the SFU's core as busy as
		// that makes it: SaturatedCoreBusy says how much).
		progress(o, "%-15s saturation trial: the paced sender at %.0f packets/s, sealed", res.Name, o.MaxRate)
		if _, _, err := trial(o.MaxRate); err != nil {
			return err
		}
		if res.SaturatedBy == "" && last != nil { // it had no loss: the sender's limit, not the SFU's
			saturatedBy(res, "paced sender, sealed, no loss", last, lastReplicated)
		}
	}
	return nil
}

// saturatedBy takes a paced trial's figures as the saturated ones.
func saturatedBy(res *SFUResult, by string, t *pacedResult, replicated uint64) {
	if replicated == 0 {
		return
	}
	res.SaturatedBy = by
	res.SaturatedReplicasPPS = float64(replicated) / t.duration.Seconds()
	res.SaturatedDeliveredPPS = float64(t.delivered) / t.duration.Seconds()
	res.RelayCoreNsPerReplica = float64(t.relayNs) / float64(replicated)
	res.SaturatedCoreBusy = float64(t.relayNs) / float64(t.duration.Nanoseconds())
}

type pacedResult struct {
	sent, delivered uint64
	duration        time.Duration
	relayNs         uint64
}

// pacedTrial sends payload (an RTP packet) from the publisher's socket at
// rate for d, in batches every millisecond (sendmmsg), each under a
// sequence number of its own (the SFU drops a repeated one as a
// duplicate; payload's own is the first, and is left the next unused)
// and then sealed with the publisher's SRTP (seal; nil: plain), and
// counts the replicas sunk.
func pacedTrial(e *env, lt *bench.LiveTraffic, conn *net.UDPConn, to netip.AddrPort, payload []byte, seal func(dst, b []byte) ([]byte, error),
	rate float64, d time.Duration) (*pacedResult, error) {
	var before bench.CoreSample
	var err error
	if e.Isolated() {
		if before, err = e.SampleCore(); err != nil {
			return nil, err
		}
	}
	sunkBefore, err := lt.Sunk()
	if err != nil {
		return nil, err
	}
	// A timestamp of its own (a frame later than the last trial's): the
	// SFU drops a packet whose number and timestamp it holds as a
	// duplicate, and the generator's frames before it carried the
	// template's, under numbers that wrapped.
	binary.BigEndian.PutUint32(payload[4:], binary.BigEndian.Uint32(payload[4:])+3000)
	pc := ipv4.NewPacketConn(conn)
	batch := make([]ipv4.Message, 64)
	dst := net.UDPAddrFromAddrPort(to)
	for i := range batch {
		batch[i] = ipv4.Message{Buffers: [][]byte{slices.Grow(slices.Clone(payload), srtpMaxOverhead)}, Addr: dst}
	}
	seq := binary.BigEndian.Uint16(payload[2:])
	var sent uint64
	start := time.Now()
	for {
		elapsed := time.Since(start)
		if elapsed >= d {
			break
		}
		due := uint64(rate * elapsed.Seconds())
		for sent < due {
			n := min(int(due-sent), len(batch))
			for i := range n {
				number := seq + uint16(sent) + uint16(i)
				if seal == nil { // plain: numbered in place
					binary.BigEndian.PutUint16(batch[i].Buffers[0][2:], number)
					continue
				}
				binary.BigEndian.PutUint16(payload[2:], number)
				b, err := seal(batch[i].Buffers[0][:0], payload) // into the message's own storage
				if err != nil {
					return nil, err
				}
				batch[i].Buffers[0] = b
			}
			w, err := pc.WriteBatch(batch[:n], 0)
			sent += uint64(max(w, 0))
			if errors.Is(err, unix.ENOBUFS) || errors.Is(err, unix.EAGAIN) {
				break // the send queue is full: the sender falls short, reported as such
			}
			if err != nil {
				return nil, err
			}
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	binary.BigEndian.PutUint16(payload[2:], seq+uint16(sent))
	time.Sleep(100 * time.Millisecond) // in flight
	sunkAfter, err := lt.Sunk()
	if err != nil {
		return nil, err
	}
	r := &pacedResult{sent: sent, delivered: sunkAfter - sunkBefore, duration: elapsed}
	if e.Isolated() {
		after, err := e.SampleCore()
		if err != nil {
			return nil, err
		}
		r.relayNs = after.RelayNsSince(before)
	}
	return r, nil
}
