package dataplane

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/layers"
)

// Simulcast in the user plane: each encoding's SSRC is learnt from its
// stream id (learnEncoding), each keeps its own templates, layer bytes
// and history (userEncoding), and each receiver takes one of them
// (layers.Replica.DecideEncoding), rewritten into one stream: the SFU's
// SSRC, and sequence numbers, timestamps and frame numbers that go on
// across a switch (rewriteEncoding). The link's allocation sees the
// encodings' decode targets one after the other, lowest encoding first
// (flatTargets).

// liveFor is how recently an encoding must have sent media (not padding)
// to be offered to receivers: a publisher whose uplink narrows stops its
// top encodings.
const liveFor = uint64(1500 * time.Millisecond) // ns, as coarseNow

// simulcastOf is the stream's simulcast video, if it has one.
func simulcastOf(sources []Source) *Simulcast {
	for _, src := range sources {
		if src.Simulcast != nil {
			return src.Simulcast
		}
	}
	return nil
}

// sameSimulcast: two descriptions of the same simulcast video.
func sameSimulcast(a, b *Simulcast) bool {
	return a != nil && b != nil && a.RIDExt == b.RIDExt && a.SSRC == b.SSRC && slices.Equal(a.RIDs, b.RIDs)
}

// withLearnt is sources with the encodings old learnt of the same
// simulcast video (SetStream is called again with the stand-in only).
func withLearnt(sources, old []Source) []Source {
	sim := simulcastOf(sources)
	if sim == nil || !sameSimulcast(sim, simulcastOf(old)) {
		return sources
	}
	out := slices.Clone(sources)
	standIn := sources[slices.IndexFunc(sources, func(s Source) bool { return s.Simulcast == sim })]
	for _, src := range old {
		if src.Simulcast != nil && src.SSRC != 0 && !hasSSRC(out, src.SSRC) {
			src.Simulcast, src.RTX = sim, standIn.RTX
			out = append(out, src)
		}
	}
	return out
}

// learntSource is the source an RTP packet with an unknown SSRC is, if
// its stream id names an encoding of the stream's simulcast video: the
// stand-in's, under its SSRC. replaced is the SSRC that encoding had.
func learntSource(sources []Source, ssrc uint32, p []byte, hdr int) (src Source, replaced uint32, ok bool) {
	i := slices.IndexFunc(sources, func(s Source) bool { return s.Simulcast != nil && s.SSRC == 0 })
	if i < 0 || ssrc == 0 {
		return Source{}, 0, false
	}
	src = sources[i]
	enc, ok := src.Simulcast.encodingOf(p, hdr)
	if !ok {
		return Source{}, 0, false
	}
	for _, s := range sources {
		if s.Simulcast != nil && s.SSRC != 0 && s.Encoding == enc {
			replaced = s.SSRC
		}
	}
	src.SSRC, src.Encoding = ssrc, enc
	return src, replaced, true
}

// learnEncoding adds the encoding an unknown SSRC's packet names to the
// stream from its sender (its first packets carry their stream id), and
// returns the stream; nil if it names none. Only such a packet takes the
// write lock (anybody can send unknown SSRCs), and an encoding that is
// live keeps its SSRC (a receiver's numbers on it go on from its own).
func (u *User) learnEncoding(from netip.AddrPort, ssrc uint32, p []byte, hdr int) *userStream {
	u.mu.RLock()
	s := u.streams[from]
	_, _, ok := learntSource(sourcesOf(s), ssrc, p, hdr)
	u.mu.RUnlock()
	if !ok {
		return nil
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if have := u.senders[userKey{from, ssrc}]; have != nil {
		return have // learnt meanwhile
	}
	if s = u.streams[from]; s == nil {
		return nil
	}
	src, replaced, ok := learntSource(s.sources, ssrc, p, hdr)
	if !ok || (replaced != 0 && live(s.video.enc[src.Encoding].lastAt.Load(), coarseNow())) {
		return nil
	}
	sources := slices.DeleteFunc(slices.Clone(s.sources), func(s Source) bool { return replaced != 0 && s.SSRC == replaced })
	receivers := make([]Receiver, len(s.receivers))
	for i, r := range s.receivers {
		receivers[i] = r.Receiver
	}
	u.setStream(from, append(sources, src), receivers)
	return u.senders[userKey{from, ssrc}]
}

func sourcesOf(s *userStream) []Source {
	if s == nil {
		return nil
	}
	return s.sources
}

// userEncoding is one encoding's video state (a stream without simulcast
// has one): bpf/sfu.c's sender_templates, layer_bytes, history and
// sim_encodings entry.
type userEncoding struct {
	structure []byte
	templates sfuLayerTemplates
	bytes     [layers.MaxTargets]counter
	history   historyRing
	lastAt    atomic.Uint64 // coarse ns of its latest packet
	ssrc      atomic.Uint32
	noDD      atomic.Bool // it has no dependency descriptor: one target, all of it
}

// live says whether an encoding whose latest media packet came at lastAt
// (0: none) is live at now (SIM_LIVE_NS); lastAt may be after now (another
// thread's clock read later).
func live(lastAt, now uint64) bool { return lastAt != 0 && (now <= lastAt || now-lastAt <= liveFor) }

// topOf is the highest encoding live at now (0 if none): sim_top.
func topOf(lastAt *[layers.MaxEncodings]uint64, now uint64) uint8 {
	for i := len(lastAt) - 1; i > 0; i-- {
		if live(lastAt[i], now) {
			return uint8(i)
		}
	}
	return 0
}

// encodingView is one encoding as the link's allocation reads it, once
// (its state moves under forwarding): the same for both data planes.
type encodingView struct {
	ssrc    uint32
	lastAt  uint64
	noDD    bool
	targets int                       // of its structure in force
	bytes   [layers.MaxTargets]uint64 // per layer, since the stream began
}

// offered is how many decode targets the encoding offers at now: none
// while it is silent.
func (e *encodingView) offered(now uint64) int {
	switch {
	case !live(e.lastAt, now):
		return 0
	case e.noDD:
		return 1
	}
	return e.targets
}

// encodingViews are a simulcast video's encodings, lowest first.
type encodingViews [layers.MaxEncodings]encodingView

// liveEncoding is one live encoding as the link's allocation sees it: of
// its targets (all), how many are offered.
type liveEncoding struct {
	index        uint8
	all, offered int
}

// layout is what the link's allocation sees of a simulcast video, lowest
// first: the lowest live encoding's decode targets, then each higher live
// encoding whole. A higher encoding's lower temporal layers are left out:
// they would cost less than the encoding below at its full frame rate,
// which a receiver is better served by (half the size, every frame,
// against a quarter of the frames), and would make the targets' rates
// fall where the allocation takes them to rise.
func (v *encodingViews) layout(now uint64) []liveEncoding {
	var out []liveEncoding
	for i := range v {
		if n := v[i].offered(now); n > 0 {
			offered := n
			if len(out) > 0 {
				offered = 1
			}
			out = append(out, liveEncoding{index: uint8(i), all: n, offered: offered})
		}
	}
	return out
}

// target is the data planes' value of flat target t.
func (v *encodingViews) target(t int, now uint64) uint32 {
	encs := v.layout(now)
	for i, e := range encs {
		switch {
		case t < e.offered && i > 0:
			return uint32(layers.EncodingTarget(e.index, layers.AllTargets))
		case t < e.offered:
			return uint32(layers.EncodingTarget(e.index, uint8(t)))
		}
		t -= e.offered
	}
	if len(encs) == 0 {
		return layers.AllTargets
	}
	return uint32(layers.EncodingTarget(encs[len(encs)-1].index, layers.AllTargets)) // past the top: all of the top
}

// flatTarget is the flat target of decode target t of encoding enc.
func (v *encodingViews) flatTarget(enc, t uint8, now uint64) int {
	base := 0
	for _, e := range v.layout(now) {
		if e.index == enc {
			return base + min(int(t), e.offered-1)
		}
		base += e.offered
	}
	return EveryLayer
}

// layers is Layers of a simulcast video: each live encoding's cumulative
// bytes per offered target, one after the other, and their SSRCs.
func (v *encodingViews) layers(now uint64) Layers {
	var out Layers
	for _, le := range v.layout(now) {
		e := &v[le.index]
		all := cumulative(e.bytes[:], le.all)
		out.Bytes = append(out.Bytes, all[le.all-le.offered:]...) // a higher encoding: its whole
		out.Encodings = append(out.Encodings, Encoding{SSRC: e.ssrc, Targets: le.offered})
	}
	out.Targets = len(out.Bytes)
	return out
}

// state is a simulcast receiver's ReceiverLayers as the encodings stand:
// its target as SetTarget had it (asked), its current target among the
// flat targets, the SSRC of its encoding.
func (v *encodingViews) state(st ReceiverLayers, asked int, a *layers.Replica, now uint64) ReceiverLayers {
	st.Target = asked
	st.SwitchWaiting = max(st.SwitchWaiting, waited(a.Sim.SwitchWait, now))
	if a.Sim.Encoding < layers.MaxEncodings {
		if a.Current < layers.NoVideo {
			st.Current = v.flatTarget(a.Sim.Encoding, a.Current, now)
		}
		st.EncodingSSRC = v[a.Sim.Encoding].ssrc
	}
	return st
}

// views is the user plane's encodings, read once.
func (v *userVideo) views() *encodingViews {
	var out encodingViews
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range v.enc {
		e, o := &v.enc[i], &out[i]
		o.ssrc, o.lastAt, o.noDD, o.targets = e.ssrc.Load(), e.lastAt.Load(), e.noDD.Load(), int(e.templates.Targets)
		for l := range o.bytes {
			o.bytes[l] = e.bytes[l].load().Bytes
		}
	}
	return &out
}

// top is the highest encoding that is live (0 if none).
func (v *userVideo) top(now uint64) uint8 {
	var lastAt [layers.MaxEncodings]uint64
	for i := range v.enc {
		lastAt[i] = v.enc[i].lastAt.Load()
	}
	return topOf(&lastAt, now)
}

// asReceived makes p, an encoding's packet from its history, the packet
// a simulcast receiver on it was sent (its SSRC, timestamp, frame number
// and VP8 picture numbering) but for its sequence number, which stays seq.
func asReceived(p []byte, sim *Simulcast, format encodingFormat, seq uint16, shift layers.Numbers) {
	at := rewriteAt{}
	if off, n := ExtensionOffset(p, format.ddExt); n >= 3 {
		at.dd = off
	}
	n := layers.Numbers{Seq: seq, TS: binary.BigEndian.Uint32(p[4:]) + shift.TS, Frame: frameNumber(p, at.dd) + shift.Frame}
	if cl := Classify(p); format.codec == VP8 && cl.Payload != nil && !paddingOnly(p, cl.Payload) {
		at.vp8 = len(p) - len(cl.Payload)
		n.VP8 = VP8PicturesOf(cl.Payload).Shifted(shift.VP8)
	}
	rewriteEncoding(p, sim, n, at)
}

// rewriteAt is where a simulcast packet holds what rewriteEncoding
// rewrites beyond its RTP header: its dependency descriptor, its VP8
// payload descriptor (0: none).
type rewriteAt struct{ dd, vp8 int }

// rewriteEncoding makes out (a copy of the input packet) the receiver's:
// the SFU's SSRC, and its numbers.
func rewriteEncoding(out []byte, sim *Simulcast, n layers.Numbers, at rewriteAt) {
	binary.BigEndian.PutUint16(out[2:], n.Seq)
	binary.BigEndian.PutUint32(out[4:], n.TS)
	binary.BigEndian.PutUint32(out[8:], sim.SSRC)
	if at.dd > 0 && at.dd+3 <= len(out) {
		binary.BigEndian.PutUint16(out[at.dd+1:], n.Frame)
	}
	if at.vp8 > 0 && at.vp8 < len(out) {
		putVP8Pictures(out[at.vp8:], n.VP8)
	}
}

// rewriteReport makes out (a copy of an encoding's sender report) the
// receiver's: the SFU's SSRC, its timestamps.
func rewriteReport(out []byte, sim *Simulcast, shift layers.Numbers) {
	binary.BigEndian.PutUint32(out[4:], sim.SSRC)
	binary.BigEndian.PutUint32(out[16:], binary.BigEndian.Uint32(out[16:])+shift.TS)
}

// simulcastChanged: a receiver made for simulcast video a is not one for b.
func simulcastChanged(a, b *Simulcast) bool {
	return (a == nil) != (b == nil) || (a != nil && !sameSimulcast(a, b))
}

// encodingFormat is what a receiver's rewrite reads in a simulcast
// video's packets: its dependency descriptor's extension id (0: none),
// and its codec (VP8: its picture numbering too).
type encodingFormat struct {
	ddExt uint8
	codec Codec
}

// formatOf is the stream's video's encodingFormat.
func formatOf(sources []Source) encodingFormat {
	for _, src := range sources {
		if src.Video != NoVideo {
			return encodingFormat{ddExt: src.DDExt, codec: src.Video}
		}
	}
	return encodingFormat{}
}

// frameNumber is the frame number of the dependency descriptor at off (0:
// none).
func frameNumber(p []byte, off int) uint16 {
	if off <= 0 || off+3 > len(p) {
		return 0
	}
	return binary.BigEndian.Uint16(p[off+1:])
}
