package offload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/pion/stun/v4"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The BPF fuzz harness: the XDP program and the TC snooper are fed random
// and mutated frames through BPF_PROG_TEST_RUN, in worlds of random
// channels, and every answer is checked against a reference model written
// in Go from the RFCs (not from the C):
//   - a passed frame is untouched; only drop outcomes drop;
//   - a forwarded frame belongs to an installed channel, carries exactly the
//     input's data to the channel's other end, with consistent lengths,
//     zeroed padding, a valid IP header checksum, and a UDP checksum that is
//     valid exactly when the input's was (never laundered);
//   - the outcome counters add up to the frames run, and the per-channel
//     counters to the fast outcomes;
//   - the snooper reports only TURN control responses from a listening port.
//
// make test runs a short budget; make fuzz a long one:
//
//	go test ./internal/offload -run TestBPFFuzz -bpffuzz.frames 10000000 -v
var (
	fuzzFrames = flag.Int("bpffuzz.frames", 30000, "frames per world for TestBPFFuzz")
	fuzzWorlds = flag.Int("bpffuzz.worlds", 2, "random worlds (map contents, configuration) for TestBPFFuzz")
	fuzzSeed   = flag.Uint64("bpffuzz.seed", 0, "seed (0: from the clock, printed)")
)

func TestBPFFuzz(t *testing.T) {
	seed := *fuzzSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -bpffuzz.seed %d)", seed, seed)
	var total fuzzStats
	start := time.Now()
	for w := range *fuzzWorlds {
		rng := rand.New(rand.NewPCG(seed, uint64(w)))
		total.add(runFuzzWorld(t, rng, *fuzzFrames, w%2 == 1)) // odd worlds run the TC build
		if t.Failed() {
			break
		}
	}
	elapsed := time.Since(start)
	t.Logf("%d frames in %v (%.0f/s): %d forwarded, %d passed, %d dropped; snooper: %d frames, %d records",
		total.frames, elapsed.Round(time.Millisecond), float64(total.frames)/elapsed.Seconds(),
		total.forwarded, total.passed, total.dropped, total.snoopFrames, total.snoopRecords)
	if total.forwarded == 0 || total.passed == 0 || total.snoopRecords == 0 {
		t.Error("the fuzzer never reached the fast path, the slow path and a snooper record: its frames test nothing")
	}
}

type fuzzStats struct{ frames, forwarded, passed, dropped, snoopFrames, snoopRecords int }

func (s *fuzzStats) add(o fuzzStats) {
	s.frames += o.frames
	s.forwarded += o.forwarded
	s.passed += o.passed
	s.dropped += o.dropped
	s.snoopFrames += o.snoopFrames
	s.snoopRecords += o.snoopRecords
}

// fuzzWorld is a rig with random channels and configuration.
type fuzzWorld struct {
	r        *rig
	rng      *rand.Rand
	channels []Channel
	limited  bool
}

func runFuzzWorld(t *testing.T, rng *rand.Rand, frames int, tc bool) fuzzStats {
	limited := rng.IntN(3) == 0
	spill := rng.IntN(3) == 0
	r := newRigWith(t, func(c *Config) {
		c.Snoop = true
		if limited {
			c.RateLimit = mustLimit(t, 8_000_000)
		}
		if spill {
			c.SpillEvery = uint32(2 + rng.IntN(50))
		}
	})
	r.tc = tc
	w := &fuzzWorld{r: r, rng: rng, limited: limited}
	w.installRandomChannels(t, 10+rng.IntN(40))
	reader, err := r.engine.SnoopReader()
	testenv.Must(t, err)
	defer reader.Close()

	before := r.outcomes()
	var st fuzzStats
	testenv.Must(t, r.ns.Do(func() error {
		// One thread in the namespace, one CPU, for the whole world.
		var cpus unix.CPUSet
		cpus.Set(0)
		if err := unix.SchedSetaffinity(0, &cpus); err != nil {
			return err
		}
		out := make([]byte, 4096)
		for i := 0; i < frames && !t.Failed(); i++ {
			ingress, in := w.frame()
			ret, got, err := w.runHook(ingress, in, out)
			if errors.Is(err, errNoSkb) {
				continue
			}
			if err != nil {
				return fmt.Errorf("%d-byte frame on %s: %w", len(in), ingress, err)
			}
			st.frames++
			switch ret {
			case xdpPass:
				st.passed++
				if !bytes.Equal(got, in) {
					t.Errorf("passed frame modified\n in % x\nout % x", in, got)
				}
			case xdpDrop:
				st.dropped++
			case xdpTX, xdpRedirect:
				st.forwarded++
				if err := w.checkForwarded(ingress, in, got, ret); err != nil {
					t.Errorf("%v\n in % x\nout % x", err, in, got)
				}
			default:
				t.Errorf("action %d", ret)
			}
			if i%4 == 0 {
				n, err := w.fuzzSnoop(t, reader)
				if err != nil {
					return err
				}
				st.snoopFrames++
				st.snoopRecords += n
			}
		}
		return nil
	}))
	w.checkCounters(t, before, st)
	return st
}

// errNoSkb: BPF_PROG_TEST_RUN builds no skb from the frame (an IP header
// shorter than its ethertype needs); the frame is not counted.
var errNoSkb = errors.New("no skb for this frame")

// runHook runs the world's build of the program (XDP or TC) on one frame;
// TC verdicts come back as the XDP actions they stand for.
func (w *fuzzWorld) runHook(ingress string, in, out []byte) (uint32, []byte, error) {
	idx := uint32(w.r.ifs[ingress].index)
	opts := &ebpf.RunOptions{Data: in, DataOut: out, Context: xdpMD{DataEnd: uint32(len(in)), IngressIfindex: idx}}
	prog := w.r.engine.Program()
	if w.r.tc {
		opts.Context, prog = skBuff{IngressIfindex: idx, Ifindex: idx}, w.r.engine.ProgramTC()
	}
	ret, err := prog.Run(opts)
	if w.r.tc && errors.Is(err, unix.EINVAL) {
		return 0, nil, errNoSkb
	}
	if err == nil && w.r.tc {
		act, ok := tcAsXDP[ret]
		if !ok {
			return 0, nil, fmt.Errorf("TC verdict %d", int32(ret))
		}
		ret = act
	}
	return ret, opts.DataOut, err
}

// Addresses the rig routes: clients on cli0, peers on peer0 (with static
// neighbours, so the fast path can be taken) or unreachable ones.
var (
	fuzzClients = []netip.Addr{netip.MustParseAddr("10.10.1.2"), netip.MustParseAddr("fd10:1::2")}
	fuzzServers = []netip.Addr{netip.MustParseAddr("10.10.1.1"), netip.MustParseAddr("fd10:1::1")}
	fuzzRelays  = []netip.Addr{netip.MustParseAddr("10.10.2.1"), netip.MustParseAddr("fd10:2::1")}
	fuzzPeers   = []netip.Addr{netip.MustParseAddr("10.10.2.2"), netip.MustParseAddr("fd10:2::2"),
		netip.MustParseAddr("10.10.2.99"), netip.MustParseAddr("10.10.3.2")}
)

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

func sameFamily(rng *rand.Rand, s []netip.Addr, v4 bool) netip.Addr {
	for {
		if a := pick(rng, s); a.Is4() == v4 {
			return a
		}
	}
}

// installRandomChannels adds n channels with distinct keys, some of them
// hairpinned pairs (peer = another allocation's relay address).
func (w *fuzzWorld) installRandomChannels(t *testing.T, n int) {
	clientKeys, peerKeys := map[string]bool{}, map[string]bool{}
	for len(w.channels) < n {
		cv4, pv4 := w.rng.IntN(2) == 0, w.rng.IntN(2) == 0
		ch := Channel{
			Client: netip.AddrPortFrom(sameFamily(w.rng, fuzzClients, cv4), uint16(40000+w.rng.IntN(8))),
			Server: netip.AddrPortFrom(sameFamily(w.rng, fuzzServers, cv4), pick(w.rng, []uint16{3478, 5349})),
			Relay:  netip.AddrPortFrom(sameFamily(w.rng, fuzzRelays, pv4), uint16(50000+w.rng.IntN(16))),
			Number: uint16(0x4000 + w.rng.IntN(0x4000)),
		}
		if w.rng.IntN(4) == 0 {
			ch.Peer = netip.AddrPortFrom(sameFamily(w.rng, fuzzRelays, pv4), uint16(50000+w.rng.IntN(16)))
		} else {
			ch.Peer = netip.AddrPortFrom(sameFamily(w.rng, fuzzPeers, pv4), uint16(60000+w.rng.IntN(4)))
		}
		ck := fmt.Sprint(ch.Client, ch.Server, ch.Number)
		pk := fmt.Sprint(ch.Peer, ch.Relay)
		if clientKeys[ck] || peerKeys[pk] || ch.Peer == ch.Relay {
			continue
		}
		clientKeys[ck], peerKeys[pk] = true, true
		testenv.Must(t, w.r.engine.AddChannel(ch))
		w.channels = append(w.channels, ch)
	}
}

// frame returns a random ingress and frame: valid for a channel, mutated,
// or random bytes; never shorter than an Ethernet header, which no driver
// hands to XDP or TC (and the test run refuses).
func (w *fuzzWorld) frame() (string, []byte) {
	ingress, f := w.anyFrame()
	return ingress, atLeastEthernet(f)
}

func atLeastEthernet(f []byte) []byte {
	if len(f) < 14 {
		f = append(f, make([]byte, 14-len(f))...)
	}
	return f
}

// atLeastIPHeader: a frame leaving the host carries its whole IP header,
// and the skb test run refuses less.
func atLeastIPHeader(f []byte) []byte {
	f = atLeastEthernet(f)
	need := 14
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x0800:
		need += 20
	case 0x86dd:
		need += 40
	}
	if len(f) < need {
		f = append(f, make([]byte, need-len(f))...)
	}
	return f
}

func (w *fuzzWorld) anyFrame() (string, []byte) {
	switch k := w.rng.IntN(10); {
	case k < 4:
		return w.validFrame()
	case k < 9:
		ingress, f := w.validFrame()
		return w.maybeOtherIngress(ingress), w.mutate(f)
	default:
		b := make([]byte, w.rng.IntN(200))
		for i := range b {
			b[i] = byte(w.rng.Uint32())
		}
		return w.maybeOtherIngress("cli0"), b
	}
}

func (w *fuzzWorld) maybeOtherIngress(ingress string) string {
	if w.rng.IntN(8) == 0 {
		return pick(w.rng, []string{"cli0", "peer0", "far0"})
	}
	return ingress
}

func (w *fuzzWorld) validFrame() (string, []byte) {
	ch := pick(w.rng, w.channels)
	data := make([]byte, w.rng.IntN(1300))
	for i := range data {
		data[i] = byte(w.rng.Uint32())
	}
	u := frame.UDP{TOS: uint8(w.rng.Uint32()), TTL: uint8(1 + w.rng.IntN(255)), DF: w.rng.IntN(2) == 0,
		ID: uint16(w.rng.Uint32()), NoChecksum: w.rng.IntN(8) == 0}
	if w.rng.IntN(2) == 0 {
		pad := w.rng.IntN(frame.PadTo4(len(data)) + 1)
		u.Src, u.Dst, u.Payload = ch.Client, ch.Server, frame.ChannelData(ch.Number, data, pad, byte(w.rng.Uint32()))
		u.NoChecksum = u.NoChecksum && ch.Client.Addr().Is4()
		return "cli0", w.r.from("cli0", u)
	}
	u.Src, u.Dst, u.Payload = ch.Peer, ch.Relay, data
	u.NoChecksum = u.NoChecksum && ch.Peer.Addr().Is4()
	return "peer0", w.r.from("peer0", u)
}

// mutate flips, truncates, extends or rewrites bytes, often in the headers.
func (w *fuzzWorld) mutate(f []byte) []byte {
	f = bytes.Clone(f)
	for range 1 + w.rng.IntN(3) {
		switch w.rng.IntN(5) {
		case 0, 1: // a byte in the first 80 (Ethernet, IP, UDP, ChannelData headers)
			if len(f) > 0 {
				f[w.rng.IntN(min(len(f), 80))] ^= byte(1 + w.rng.IntN(255))
			}
		case 2:
			if len(f) > 0 {
				f[w.rng.IntN(len(f))] = byte(w.rng.Uint32())
			}
		case 3:
			f = f[:w.rng.IntN(len(f)+1)]
		case 4:
			for range 1 + w.rng.IntN(8) {
				f = append(f, byte(w.rng.Uint32()))
			}
		}
	}
	return f
}

// parsedIn is the reference parse of an input frame, lenient on the UDP
// checksum (the program forwards bad ones, keeping them bad).
type parsedIn struct {
	src, dst netip.AddrPort
	tos      uint8
	df       bool
	payload  []byte
	csum     uint16
	csumOK   bool
}

// parseInput accepts what RFC 791/8200/768 call a plain datagram: Ethernet
// without VLAN, IPv4 without options or fragmentation and with a valid
// header checksum, IPv6 without extension headers, UDP whose length is the
// IP payload's (Ethernet padding after it allowed), no zero checksum on IPv6.
func parseInput(b []byte) (parsedIn, bool) {
	var p parsedIn
	if len(b) < 14 {
		return p, false
	}
	var udp []byte
	var src, dst netip.Addr
	switch binary.BigEndian.Uint16(b[12:]) {
	case 0x0800:
		ip := b[14:]
		if len(ip) < 20 || ip[0] != 0x45 || ip[9] != 17 || binary.BigEndian.Uint16(ip[6:])&0x3fff != 0 || frame.Checksum(ip[:20]) != 0 {
			return p, false
		}
		total := int(binary.BigEndian.Uint16(ip[2:]))
		if total < 28 || total > len(ip) {
			return p, false
		}
		p.tos, p.df = ip[1], ip[6]&0x40 != 0
		src, dst = netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
		udp = ip[20:total]
	case 0x86dd:
		ip := b[14:]
		if len(ip) < 48 || ip[0]>>4 != 6 || ip[6] != 17 {
			return p, false
		}
		plen := int(binary.BigEndian.Uint16(ip[4:]))
		if plen < 8 || 40+plen > len(ip) {
			return p, false
		}
		w := binary.BigEndian.Uint32(ip)
		p.tos, p.df = uint8(w>>20), true
		src, dst = netip.AddrFrom16([16]byte(ip[8:24])), netip.AddrFrom16([16]byte(ip[24:40]))
		udp = ip[40 : 40+plen]
	default:
		return p, false
	}
	if int(binary.BigEndian.Uint16(udp[4:])) != len(udp) {
		return p, false
	}
	p.src = netip.AddrPortFrom(src, binary.BigEndian.Uint16(udp[0:]))
	p.dst = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(udp[2:]))
	p.payload = udp[8:]
	p.csum = binary.BigEndian.Uint16(udp[6:])
	if p.csum == 0 && src.Is6() {
		return p, false
	}
	cp := bytes.Clone(udp)
	cp[6], cp[7] = 0, 0
	p.csumOK = p.csum == 0 || frame.UDPChecksum(src, dst, cp) == p.csum
	return p, true
}

// expected is what the reference model relays the input as: the channel's
// other end and the bytes of the outgoing UDP payload.
func (w *fuzzWorld) expected(in parsedIn) (src, dst netip.AddrPort, payload []byte, ok bool) {
	pl := in.payload
	if len(pl) >= 4 && pl[0]>>6 == 1 {
		number, dataLen := binary.BigEndian.Uint16(pl), int(binary.BigEndian.Uint16(pl[2:]))
		if extra := len(pl) - 4 - dataLen; extra >= 0 && extra <= 3 {
			for _, ch := range w.channels {
				if ch.Client == in.src && ch.Server == in.dst && ch.Number == number {
					data := pl[4 : 4+dataLen]
					if back, ok := w.hairpin(ch); ok {
						return back.Server, back.Client, frame.ChannelData(back.Number, data, frame.PadTo4(len(data)), 0), true
					}
					return ch.Relay, ch.Peer, data, true
				}
			}
		}
	}
	for _, ch := range w.channels {
		if ch.Peer == in.src && ch.Relay == in.dst {
			return ch.Server, ch.Client, frame.ChannelData(ch.Number, pl, frame.PadTo4(len(pl)), 0), true
		}
	}
	return src, dst, nil, false
}

// hairpin is the channel back from a peer that is one of our relay addresses.
func (w *fuzzWorld) hairpin(ch Channel) (Channel, bool) {
	for _, back := range w.channels {
		if back.Peer == ch.Relay && back.Relay == ch.Peer {
			return back, true
		}
	}
	return Channel{}, false
}

func (w *fuzzWorld) checkForwarded(ingress string, in, out []byte, action uint32) error {
	p, ok := parseInput(in)
	if !ok {
		return errors.New("forwarded a frame that is not a plain UDP datagram")
	}
	src, dst, payload, ok := w.expected(p)
	if !ok {
		return fmt.Errorf("forwarded %v -> %v, which no channel relays", p.src, p.dst)
	}
	// The kernel would drop a source of ours or one not routed back through
	// the ingress interface (RFC 3704 strict reverse path).
	if isRigAddress(p.src.Addr()) || egressOf(p.src) != ingress {
		return fmt.Errorf("forwarded a frame from %v arriving on %s, which the kernel would drop", p.src, ingress)
	}
	o, ok := parseInput(out)
	if !ok {
		return errors.New("the output is not a plain UDP datagram (headers, lengths or IPv4 checksum)")
	}
	if len(out) != 14+ipLen(dst)+8+len(payload) {
		return fmt.Errorf("output is %d bytes, want %d (no trailer)", len(out), 14+ipLen(dst)+8+len(payload))
	}
	switch {
	case o.src != src || o.dst != dst:
		return fmt.Errorf("output %v -> %v, want %v -> %v", o.src, o.dst, src, dst)
	case !bytes.Equal(o.payload, payload):
		return fmt.Errorf("output payload differs from the input's data\n got % x\nwant % x", o.payload, payload)
	case o.tos != p.tos:
		return fmt.Errorf("traffic class %#x, input %#x", o.tos, p.tos)
	case dst.Addr().Is4() && o.df != p.df:
		return fmt.Errorf("DF %v, input %v", o.df, p.df)
	}
	// The checksum is valid exactly when the input's was; a zero one stays
	// zero towards IPv4 and is computed towards IPv6.
	switch {
	case p.csum == 0 && dst.Addr().Is4():
		if o.csum != 0 {
			return errors.New("zero UDP checksum became non-zero towards IPv4")
		}
	case o.csum == 0:
		return errors.New("zero UDP checksum on output")
	case o.csumOK != p.csumOK:
		return fmt.Errorf("UDP checksum valid %v, input's valid %v (laundered or broken)", o.csumOK, p.csumOK)
	}
	wantAction := uint32(xdpRedirect)
	if ingress == egressOf(dst) && !w.r.tc { // TC redirects either way
		wantAction = xdpTX
	}
	if action != wantAction {
		return fmt.Errorf("action %d, want %d", action, wantAction)
	}
	return nil
}

// isRigAddress: one of the rig's own interface addresses (x.x.x.1, ...::1).
func isRigAddress(a netip.Addr) bool {
	for _, addrs := range rigAddrs {
		for _, s := range addrs {
			if netip.MustParsePrefix(s).Addr() == a {
				return true
			}
		}
	}
	return false
}

func ipLen(a netip.AddrPort) int {
	if a.Addr().Is4() {
		return 20
	}
	return 40
}

func egressOf(dst netip.AddrPort) string {
	for name, addrs := range rigAddrs {
		for _, a := range addrs {
			if netip.MustParsePrefix(a).Contains(dst.Addr()) {
				return name
			}
		}
	}
	return ""
}

// checkCounters: every frame counted once by outcome, the actions match the
// outcome classes, and the channels' counters add up to the fast outcomes.
func (w *fuzzWorld) checkCounters(t *testing.T, before map[Outcome]Counter, st fuzzStats) {
	after := w.r.outcomes()
	var all, fast, drop uint64
	for o := range Outcomes() {
		d := after[Outcome(o)].Packets - before[Outcome(o)].Packets
		all += d
		switch {
		case Outcome(o) <= FastHairpin:
			fast += d
		case Outcome(o).IsDrop():
			drop += d
		}
	}
	if all != uint64(st.frames) || fast != uint64(st.forwarded) || drop != uint64(st.dropped) {
		t.Errorf("outcomes: %d counted (fast %d, drop %d) for %d frames (forwarded %d, dropped %d)",
			all, fast, drop, st.frames, st.forwarded, st.dropped)
	}
	if !w.limited && drop != after[DropRewriteFailed].Packets-before[DropRewriteFailed].Packets {
		t.Error("rate-limit drops without a limit")
	}
	var flows uint64
	for _, ch := range w.channels {
		p, c, err := w.r.engine.ChannelStats(ch)
		testenv.Must(t, err)
		flows += p.Packets + c.Packets
	}
	hairpin := after[FastHairpin].Packets - before[FastHairpin].Packets
	if flows != fast+hairpin {
		t.Errorf("channel counters sum to %d, fast outcomes to %d (+%d hairpins counted twice)", flows, fast, hairpin)
	}
}

// fuzzSnoop feeds the TC snooper a random or mutated server response and
// checks that a record comes exactly for a TURN control response sent from
// a listening port, carrying that message's type and transaction id. It
// runs on the world's namespace thread, so it reports setup failures as
// errors rather than ending the test from there.
func (w *fuzzWorld) fuzzSnoop(t *testing.T, reader *SnoopReader) (int, error) {
	ch := pick(w.rng, w.channels)
	method := pick(w.rng, []stun.Method{stun.MethodAllocate, stun.MethodRefresh, stun.MethodCreatePermission,
		stun.MethodChannelBind, stun.MethodBinding, stun.MethodSend})
	class := pick(w.rng, []stun.MessageClass{stun.ClassSuccessResponse, stun.ClassErrorResponse, stun.ClassRequest, stun.ClassIndication})
	setters := []stun.Setter{stun.TransactionID, stun.NewType(method, class)}
	for range w.rng.IntN(20) {
		switch w.rng.IntN(4) {
		case 0:
			setters = append(setters, stun.RawAttribute{Type: stun.AttrChannelNumber, Value: []byte{0x40, byte(w.rng.Uint32()), 0, 0}})
		case 1:
			setters = append(setters, stun.RawAttribute{Type: stun.AttrLifetime, Value: []byte{0, 0, 2, 88}})
		case 2:
			setters = append(setters, xorAttr(stun.AttrXORRelayedAddress, ch.Relay))
		case 3:
			setters = append(setters, stun.NewSoftware("x"))
		}
	}
	m, err := stun.Build(setters...)
	if err != nil {
		return 0, err
	}
	server := ch.Server
	if w.rng.IntN(8) == 0 {
		server = netip.AddrPortFrom(server.Addr(), 9999) // not a listening port
	}
	f := w.r.toward("cli0", frame.UDP{Src: server, Dst: ch.Client, TTL: 64, Payload: m.Raw})
	if w.rng.IntN(3) == 0 {
		f = atLeastIPHeader(w.mutate(f))
	}
	// Records of requests the XDP program saw share the ring: drop them first.
	for reader.r.AvailableBytes() > 0 {
		if _, err := reader.Read(); errors.Is(err, ErrClosed) {
			return 0, err
		}
	}
	ret, err := w.r.engine.snoop.Run(&ebpf.RunOptions{Data: f})
	if err != nil {
		return 0, fmt.Errorf("snooper run on a %d-byte frame: %w", len(f), err)
	}
	if ret != tcActUnspec { // the snooper never changes the server's traffic, nor ends the TC chain
		t.Errorf("snooper returned %d", int32(ret))
	}
	// The record, if any, is committed by the time the run returns.
	var ev SnoopEvent
	got := reader.r.AvailableBytes() > 0
	var decodeErr error
	if got {
		// A record user space cannot decode (an unknown address family) is
		// refused there; it still must have come from a snoopable message.
		ev, decodeErr = reader.Read()
		if errors.Is(decodeErr, ErrClosed) {
			return 0, decodeErr
		}
	}
	want, msg := snoopable(f)
	switch {
	case got && !want:
		t.Errorf("the snooper reported %+v for a frame that is no TURN control response from a listening port\n% x", ev, f)
	case !got && want:
		t.Errorf("the snooper missed a TURN control response from a listening port\n% x", f)
	case got && decodeErr == nil && (ev.Type != msg.Type.Value() || ev.TransactionID != msg.TransactionID || ev.Direction != SnoopResponse):
		t.Errorf("record %+v, message type %#x transaction %x", ev, msg.Type.Value(), msg.TransactionID)
	}
	if got {
		return 1, nil
	}
	return 0, nil
}

// snoopable is the reference: a UDP datagram from a listening port (3478,
// 5349) whose payload is exactly one STUN message (RFC 8489 header, length
// matching the datagram, attributes within it) of a TURN method that sets up
// relaying, in a response class, with at most 16 attributes.
func snoopable(f []byte) (bool, *stun.Message) {
	// The server's own datagrams leaving the host: their checksums may be
	// left to the NIC, so they are not the snooper's to check.
	p, ok := parseInput(f)
	if !ok || (p.src.Port() != 3478 && p.src.Port() != 5349) {
		return false, nil
	}
	// RFC 8489 section 5: the two most significant bits are zero (pion's
	// decoder does not check them).
	if len(p.payload) == 0 || p.payload[0]>>6 != 0 {
		return false, nil
	}
	m := &stun.Message{Raw: bytes.Clone(p.payload)}
	if m.Decode() != nil || int(m.Length)+20 != len(p.payload) {
		return false, nil
	}
	if n, ok := stunAttributes(p.payload[20:]); !ok || n > 16 {
		return false, nil
	}
	if m.Type.Class != stun.ClassSuccessResponse && m.Type.Class != stun.ClassErrorResponse {
		return false, nil
	}
	switch m.Type.Method {
	case stun.MethodAllocate, stun.MethodRefresh, stun.MethodCreatePermission, stun.MethodChannelBind:
		return true, m
	}
	return false, nil
}

// stunAttributes walks the attribute list (RFC 8489 section 14: type,
// length, value padded to 4 bytes) and counts it; false if the last one
// runs past the end. (pion's decoder stops at MESSAGE-INTEGRITY.)
func stunAttributes(b []byte) (int, bool) {
	n := 0
	for len(b) > 0 {
		if len(b) < 4 {
			return n, false
		}
		l := int(binary.BigEndian.Uint16(b[2:]))
		if 4+l > len(b) {
			return n, false
		}
		n++
		b = b[min(len(b), 4+(l+3)&^3):]
	}
	return n, true
}
