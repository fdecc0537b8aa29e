package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/pion/rtcp"
)

// Path is where a receiver's feedback about one sender goes: each
// receiver has one receive-only PeerConnection per remote sender, so its
// transport names exactly one sender (Scallop, section 5.3).
type Path struct {
	Sender netip.AddrPort // the sender's transport address
	Via    netip.AddrPort // the SFU's address and port on the sender's connection
}

// FeedbackConfig holds the handlers and the timing.
type FeedbackConfig struct {
	// Send transmits p to `to` from the SFU's socket at via.
	Send func(p []byte, to, via netip.AddrPort) error
	// PLIInterval: at most one PLI (or FIR) per sender and media SSRC in
	// this long, however many receivers ask (default 500 ms).
	PLIInterval time.Duration
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
	// Original maps a sequence number a receiver's NACK names to the
	// sender's (the data plane renumbers receivers whose layers it drops);
	// false: the number was never given, or is too old. Nil: NACKs go
	// through as they are.
	Original func(sender, receiver netip.AddrPort, number uint16) (uint16, bool)
}

// Feedback routes receivers' RTCP to senders. NACKs go through as they
// are; PLIs and FIRs once per sender and interval; REMBs only from each
// sender's best downlink (the highest smoothed estimate among its
// receivers), so one slow receiver does not lower what everyone gets: the
// SFU adapts that receiver's stream instead. Receiver reports stay here.
type Feedback struct {
	cfg FeedbackConfig

	mu      sync.Mutex
	paths   map[netip.AddrPort]Path
	lastPLI map[pliKey]time.Time
	remb    map[netip.AddrPort]map[netip.AddrPort]float64 // sender -> receiver -> EWMA (bps)
	loss    map[netip.AddrPort][2]float64                 // receiver -> its last two reports' highest fraction lost
	nacked  map[netip.AddrPort]*nackLog                   // receiver -> packets its NACKs asked for
}

// nackLog counts the distinct packets a receiver NACKed: a receiver asks
// again for a packet until it comes, each ask is not another loss.
type nackLog struct {
	count  uint64
	recent [64]uint16
	next   int
}

func (l *nackLog) add(seq uint16) {
	for _, s := range l.recent[:min(l.next, len(l.recent))] {
		if s == seq {
			return
		}
	}
	l.recent[l.next%len(l.recent)] = seq
	l.next++
	l.count++
}

type pliKey struct {
	sender netip.AddrPort
	ssrc   uint32
}

// rembWeight is the EWMA weight of a new estimate (Scallop smooths each
// receiver's REMB before taking the maximum).
const rembWeight = 0.3

// NewFeedback routes nothing until paths are set.
func NewFeedback(cfg FeedbackConfig) (*Feedback, error) {
	if cfg.Send == nil {
		return nil, errors.New("agent: feedback needs Send")
	}
	if cfg.PLIInterval == 0 {
		cfg.PLIInterval = 500 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Feedback{cfg: cfg, paths: map[netip.AddrPort]Path{}, lastPLI: map[pliKey]time.Time{},
		remb: map[netip.AddrPort]map[netip.AddrPort]float64{}, loss: map[netip.AddrPort][2]float64{},
		nacked: map[netip.AddrPort]*nackLog{}}, nil
}

// SetPath says the receiver at this transport address receives this sender.
func (f *Feedback) SetPath(receiver netip.AddrPort, p Path) {
	f.mu.Lock()
	f.paths[receiver] = p
	f.mu.Unlock()
}

// RemovePath forgets a receiver; its estimate no longer counts.
func (f *Feedback) RemovePath(receiver netip.AddrPort) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.paths[receiver]; ok {
		delete(f.remb[p.Sender], receiver)
	}
	delete(f.paths, receiver)
	delete(f.loss, receiver)
	delete(f.nacked, receiver)
}

// RemoveSender forgets what was kept about a sender (its receivers' paths
// go with RemovePath).
func (f *Feedback) RemoveSender(sender netip.AddrPort) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.remb, sender)
	for k := range f.lastPLI {
		if k.sender == sender {
			delete(f.lastPLI, k)
		}
	}
}

// RequestKeyFrame asks the sender for a key frame of mediaSSRC (a PLI from
// the SFU, deduplicated with the receivers' own): a receiver that just
// joined can decode nothing before one.
func (f *Feedback) RequestKeyFrame(sender, via netip.AddrPort, mediaSSRC uint32) error {
	f.mu.Lock()
	fresh := f.firstPLI(sender, mediaSSRC, f.cfg.Now())
	f.mu.Unlock()
	if !fresh {
		return nil
	}
	b, err := rtcp.Marshal([]rtcp.Packet{&rtcp.PictureLossIndication{SenderSSRC: sfuSSRC, MediaSSRC: mediaSSRC}})
	if err != nil {
		return err
	}
	return f.cfg.Send(b, sender, via)
}

// sfuSSRC is the SSRC the SFU's own RTCP goes out with.
const sfuSSRC = 0x5f0e7b1c

// Handle routes one RTCP datagram a receiver sent. Feedback from an
// unknown transport, or that does not parse, is dropped with an error.
func (f *Feedback) Handle(p []byte, from netip.AddrPort) error {
	pkts, err := rtcp.Unmarshal(p)
	if err != nil {
		return fmt.Errorf("agent: RTCP from %v: %w", from, err)
	}
	f.mu.Lock()
	path, ok := f.paths[from]
	var out []rtcp.Packet
	if ok {
		out = f.route(path, from, pkts)
	}
	f.mu.Unlock()
	if !ok {
		return fmt.Errorf("agent: RTCP from %v, which receives nothing", from)
	}
	if len(out) == 0 {
		return nil
	}
	b, err := rtcp.Marshal(out)
	if err != nil {
		return fmt.Errorf("agent: RTCP to %v: %w", path.Sender, err)
	}
	return f.cfg.Send(b, path.Sender, path.Via)
}

// route picks what of one receiver's compound goes to its sender.
func (f *Feedback) route(path Path, from netip.AddrPort, pkts []rtcp.Packet) []rtcp.Packet {
	var out []rtcp.Packet
	now := f.cfg.Now()
	for _, pkt := range pkts {
		switch p := pkt.(type) {
		case *rtcp.TransportLayerNack:
			l := f.nacked[from]
			if l == nil {
				l = &nackLog{}
				f.nacked[from] = l
			}
			for _, pair := range p.Nacks {
				for _, seq := range pair.PacketList() {
					l.add(seq)
				}
			}
			if p = f.translate(path.Sender, from, p); p != nil {
				out = append(out, p)
			}
		case *rtcp.PictureLossIndication:
			if f.firstPLI(path.Sender, p.MediaSSRC, now) {
				out = append(out, p)
			}
		case *rtcp.FullIntraRequest:
			// RFC 5104 4.3.1: the SSRCs asked for are in the entries.
			fresh := false
			for _, e := range p.FIR {
				fresh = f.firstPLI(path.Sender, e.SSRC, now) || fresh
			}
			if fresh {
				out = append(out, p)
			}
		case *rtcp.ReceiverReport:
			f.loss[from] = [2]float64{highestLoss(p.Reports), f.loss[from][0]}
		case *rtcp.ReceiverEstimatedMaximumBitrate:
			if smoothed, best := f.bestDownlink(path.Sender, from, float64(p.Bitrate)); best {
				fwd := *p
				fwd.Bitrate = float32(smoothed) // the sender sees the smoothed best, not one raw dip
				out = append(out, &fwd)
			}
		}
	}
	return out
}

// translate renames a NACK's numbers to the sender's; nil if none is left.
func (f *Feedback) translate(sender, receiver netip.AddrPort, n *rtcp.TransportLayerNack) *rtcp.TransportLayerNack {
	if f.cfg.Original == nil {
		return n
	}
	var seqs []uint16
	for _, pair := range n.Nacks {
		for _, number := range pair.PacketList() {
			if seq, ok := f.cfg.Original(sender, receiver, number); ok {
				seqs = append(seqs, seq)
			}
		}
	}
	if len(seqs) == 0 {
		return nil
	}
	return &rtcp.TransportLayerNack{SenderSSRC: n.SenderSSRC, MediaSSRC: n.MediaSSRC, Nacks: rtcp.NackPairsFromSequenceNumbers(seqs)}
}

func highestLoss(rs []rtcp.ReceptionReport) float64 {
	var l uint8
	for _, r := range rs {
		l = max(l, r.FractionLost)
	}
	return float64(l) / 256
}

// Loss is the share of packets lost the receiver's last two reports gave
// (the lower: one report of a slow stream can show 10% from two packets
// lost at random; the highest of its streams), and how many distinct packets
// its NACKs have asked for so far (loss as soon as it is seen).
func (f *Feedback) Loss(receiver netip.AddrPort) (share float64, nacked uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if l := f.nacked[receiver]; l != nil {
		nacked = l.count
	}
	l := f.loss[receiver]
	return min(l[0], l[1]), nacked
}

// Estimated says whether any receiver of the sender sent an estimate.
func (f *Feedback) Estimated(sender netip.AddrPort) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.remb[sender]) > 0
}

// Estimate is the receiver's smoothed bandwidth estimate (REMB) for the
// sender's streams, bits/s, if it sent one.
func (f *Feedback) Estimate(sender, receiver netip.AddrPort) (float64, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.remb[sender][receiver]
	return v, ok
}

func (f *Feedback) firstPLI(sender netip.AddrPort, ssrc uint32, now time.Time) bool {
	k := pliKey{sender, ssrc}
	if last, ok := f.lastPLI[k]; ok && now.Sub(last) < f.cfg.PLIInterval {
		return false
	}
	f.lastPLI[k] = now
	return true
}

// bestDownlink smooths the receiver's estimate and says whether it is now
// the sender's best (ties: the receiver just heard).
func (f *Feedback) bestDownlink(sender, receiver netip.AddrPort, bps float64) (float64, bool) {
	est := f.remb[sender]
	if est == nil {
		est = map[netip.AddrPort]float64{}
		f.remb[sender] = est
	}
	if old, ok := est[receiver]; ok {
		bps = (1-rembWeight)*old + rembWeight*bps
	}
	est[receiver] = bps
	for r, v := range est {
		if r != receiver && v > bps {
			return bps, false
		}
	}
	return bps, true
}
