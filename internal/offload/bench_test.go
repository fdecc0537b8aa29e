package offload

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// BenchmarkFastPath times one packet through the XDP program in the kernel
// (BPF_PROG_TEST_RUN), per direction: parse, lookup, FIB lookup, rewrite,
// checksum and counters; the redirect itself is not executed.
func BenchmarkFastPath(b *testing.B) { benchmarkFastPath(b, false) }

// BenchmarkFastPathTC: the same through the TC build, on skbs.
func BenchmarkFastPathTC(b *testing.B) { benchmarkFastPath(b, true) }

func benchmarkFastPath(b *testing.B, tc bool) {
	r := newRig(b)
	r.tc = tc
	prog := r.engine.Program()
	if tc {
		prog = r.engine.ProgramTC()
	}
	v4, v6 := families["v4"], families["v6"]
	data := payload(160, 12) // an Opus-sized RTP packet
	cases := []struct {
		name    string
		chans   []Channel
		ingress string
		frame   func(ch []Channel) []byte
	}{
		{"client_to_peer/v4", []Channel{channelFor(v4, v4, 0x4000)}, "cli0", func(ch []Channel) []byte {
			return r.from("cli0", frame.UDP{Src: ch[0].Client, Dst: ch[0].Server, Payload: frame.ChannelData(ch[0].Number, data, 0, 0)})
		}},
		{"peer_to_client/v4", []Channel{channelFor(v4, v4, 0x4000)}, "peer0", func(ch []Channel) []byte {
			return r.from("peer0", frame.UDP{Src: ch[0].Peer, Dst: ch[0].Relay, Payload: data})
		}},
		{"client_to_peer/v6", []Channel{channelFor(v6, v6, 0x4000)}, "cli0", func(ch []Channel) []byte {
			return r.from("cli0", frame.UDP{Src: ch[0].Client, Dst: ch[0].Server, Payload: frame.ChannelData(ch[0].Number, data, 0, 0)})
		}},
		{"peer_to_client/v6", []Channel{channelFor(v6, v6, 0x4000)}, "peer0", func(ch []Channel) []byte {
			return r.from("peer0", frame.UDP{Src: ch[0].Peer, Dst: ch[0].Relay, Payload: data})
		}},
		{"hairpin/v4", []Channel{
			{Client: v4.client, Server: v4.server, Relay: v4.relay, Peer: v4.relayB, Number: 0x4000},
			{Client: v4.clientB, Server: v4.server, Relay: v4.relayB, Peer: v4.relay, Number: 0x4001},
		}, "cli0", func(ch []Channel) []byte {
			return r.from("cli0", frame.UDP{Src: ch[0].Client, Dst: ch[0].Server, Payload: frame.ChannelData(ch[0].Number, data, 0, 0)})
		}},
		{"slow_path_stun/v4", []Channel{channelFor(v4, v4, 0x4000)}, "cli0", func(ch []Channel) []byte {
			return r.from("cli0", frame.UDP{Src: ch[0].Client, Dst: ch[0].Server, Payload: stunBinding()})
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			for _, ch := range tc.chans {
				testenv.Must(b, r.engine.AddChannel(ch))
			}
			defer func() {
				for _, ch := range tc.chans {
					testenv.Must(b, r.engine.RemoveChannel(ch))
				}
			}()
			b.ReportMetric(r.kernelNsPerRun(b, prog, tc.ingress, tc.frame(tc.chans)), "ns/packet")
		})
	}
	// The harness's own cost: an empty XDP program timed the same way.
	b.Run("empty_program", func(b *testing.B) {
		if tc {
			b.Skip("the harness is timed with XDP only")
		}
		var objs xdppassObjects
		testenv.Must(b, loadXdppassObjects(&objs, nil))
		defer objs.Close()
		b.ReportMetric(r.kernelNsPerRun(b, objs.XdpPass, "cli0", make([]byte, 64)), "ns/packet")
	})
}

// kernelNsPerRun runs prog b.N times on a fresh copy of in (repeat 1: with
// repeat > 1 the kernel reruns on the already rewritten buffer) and averages
// the run time the kernel measured around the program.
func (r *rig) kernelNsPerRun(b *testing.B, prog *ebpf.Program, ingress string, in []byte) float64 {
	return r.kernelNsPerRunOf(b, prog, ingress, [][]byte{in})
}

// kernelNsPerRunOf is kernelNsPerRun over several frames, taken in turn.
func (r *rig) kernelNsPerRunOf(b *testing.B, prog *ebpf.Program, ingress string, frames [][]byte) float64 {
	b.Helper()
	maxLen := 0
	for _, f := range frames {
		maxLen = max(maxLen, len(f))
	}
	out := make([]byte, maxLen+512)
	idx := uint32(r.ifs[ingress].index)
	xdpCtx, skbCtx := xdpMD{IngressIfindex: idx}, skBuff{IngressIfindex: idx, Ifindex: idx}
	ctx, ctxSize := unsafe.Pointer(&xdpCtx), unsafe.Sizeof(xdpCtx)
	if r.tc {
		ctx, ctxSize = unsafe.Pointer(&skbCtx), unsafe.Sizeof(skbCtx)
	}
	// The kernel's per-program statistics time the program alone (its
	// helpers included), without the test-run harness around it.
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	testenv.Must(b, err)
	defer stats.Close()
	before, err := prog.Stats()
	testenv.Must(b, err)
	var total uint64
	testenv.Must(b, r.ns.Do(func() error {
		b.ResetTimer()
		for i := range b.N {
			in := frames[i%len(frames)]
			xdpCtx.DataEnd = uint32(len(in))
			attr := progTestRun{
				progFD: uint32(prog.FD()), dataSizeIn: uint32(len(in)), dataSizeOut: uint32(len(out)),
				dataIn: uint64(uintptr(unsafe.Pointer(&in[0]))), dataOut: uint64(uintptr(unsafe.Pointer(&out[0]))),
				repeat: 1, ctxSizeIn: uint32(ctxSize), ctxIn: uint64(uintptr(ctx)),
			}
			if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_TEST_RUN, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)); errno != 0 {
				return errno
			}
			total += uint64(attr.duration)
		}
		runtime.KeepAlive(frames)
		runtime.KeepAlive(out)
		runtime.KeepAlive(&xdpCtx)
		runtime.KeepAlive(&skbCtx)
		return nil
	}))
	after, err := prog.Stats()
	testenv.Must(b, err)
	if runs := after.RunCount - before.RunCount; runs > 0 {
		b.ReportMetric(float64(after.Runtime-before.Runtime)/float64(runs), "prog-ns/packet")
	}
	return float64(total) / float64(b.N)
}

// progTestRun is the BPF_PROG_TEST_RUN member of union bpf_attr.
type progTestRun struct {
	progFD, retval, dataSizeIn, dataSizeOut uint32
	dataIn, dataOut                         uint64
	repeat, duration                        uint32
	ctxSizeIn, ctxSizeOut                   uint32
	ctxIn, ctxOut                           uint64
	flags, cpu, batchSize                   uint32
	_                                       uint32
}

// BenchmarkFastPathRateLimited: the same client-to-peer packet with a
// bandwidth limit (max-bps) high enough never to drop: the bucket's cost.
func BenchmarkFastPathRateLimited(b *testing.B) {
	r := newRigWith(b, func(c *Config) { c.RateLimit = mustLimit(b, 100_000_000_000) })
	v4 := families["v4"]
	ch := channelFor(v4, v4, 0x4000)
	testenv.Must(b, r.engine.AddChannel(ch))
	in := r.from("cli0", frame.UDP{Src: ch.Client, Dst: ch.Server, Payload: frame.ChannelData(ch.Number, payload(160, 12), 0, 0)})
	b.ReportMetric(r.kernelNsPerRun(b, r.engine.Program(), "cli0", in), "ns/packet")
}

// BenchmarkFastPathScaling: client-to-peer, IPv4, with 10, 1,000 and 50,000
// channels installed and 1, 8 or 64 of them active (frames taken in turn),
// so the cost of bigger maps (hash buckets, cache misses) shows. All flows
// go to one peer address, so the next-hop cache always hits; what grows is
// the route and counter lookups.
func BenchmarkFastPathScaling(b *testing.B) {
	for _, installed := range []int{10, 1000, 50000} {
		r := newRig(b)
		v4 := families["v4"]
		chans := make([]Channel, installed)
		for i := range chans {
			chans[i] = Channel{
				Client: netip.AddrPortFrom(v4.client.Addr(), uint16(10000+i)), Server: v4.server,
				Relay:  netip.AddrPortFrom(v4.relay.Addr(), uint16(49152+i%16000)),
				Peer:   netip.AddrPortFrom(v4.peer.Addr(), uint16(1024+i)),
				Number: uint16(0x4000 + i%0x4000),
			}
			testenv.Must(b, r.engine.AddChannel(chans[i]))
		}
		data := payload(160, 12)
		for _, active := range []int{1, 8, 64} {
			if active > installed {
				continue
			}
			b.Run(fmt.Sprintf("channels=%d/active=%d", installed, active), func(b *testing.B) {
				frames := make([][]byte, active)
				for i := range frames {
					ch := chans[i*installed/active]
					frames[i] = r.from("cli0", frame.UDP{Src: ch.Client, Dst: ch.Server, Payload: frame.ChannelData(ch.Number, data, 0, 0)})
				}
				b.ReportMetric(r.kernelNsPerRunOf(b, r.engine.Program(), "cli0", frames), "ns/packet")
			})
		}
		testenv.Must(b, r.engine.Close())
	}
}
