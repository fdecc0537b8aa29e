package offload

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/forwarding"
	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// rig is a namespace with a client-facing and a peer-facing interface (veth
// pairs, the far ends unused) and static neighbours, so bpf_fib_lookup
// resolves MAC addresses while BPF_PROG_TEST_RUN feeds the program frames.
type rig struct {
	t      testing.TB
	ns     *netns.NS
	engine *Engine
	ifs    map[string]rigIface
	tc     bool // run the TC build of the program instead of the XDP one
}

// forEachHook runs a test against the XDP program and against its TC build.
func forEachHook(t *testing.T, test func(t *testing.T, r *rig)) {
	for _, hook := range []string{"xdp", "tc"} {
		t.Run(hook, func(t *testing.T) {
			r := newRig(t)
			r.tc = hook == "tc"
			test(t, r)
		})
	}
}

type rigIface struct {
	index int
	mac   net.HardwareAddr
}

var (
	serverMAC = map[string]string{"cli0": "02:00:00:00:01:01", "peer0": "02:00:00:00:02:01", "far0": "02:00:00:00:03:01"}
	neighMAC  = map[string]string{"cli0": "02:00:00:00:01:02", "peer0": "02:00:00:00:02:02", "far0": "02:00:00:00:03:02"}
	rigAddrs  = map[string][2]string{
		"cli0":  {"10.10.1.1/24", "fd10:1::1/64"},
		"peer0": {"10.10.2.1/24", "fd10:2::1/64"},
		"far0":  {"10.10.3.1/24", "fd10:3::1/64"},
	}
	rigNeighs = map[string][]string{
		"cli0":  {"10.10.1.2", "fd10:1::2"},
		"peer0": {"10.10.2.2", "fd10:2::2"},
		"far0":  {"10.10.3.2", "fd10:3::2"},
	}
)

const peerMTU = 1280

func newRig(t testing.TB) *rig { return newRigWith(t, nil) }

// newRigWith lets a test adjust the engine's configuration.
func newRigWith(t testing.TB, adjust func(*Config)) *rig {
	t.Helper()
	testenv.RequireRoot(t)
	ns, err := netns.New("ebrtc-ut")
	if err != nil {
		testenv.Missing(t, "network namespace: %v", err)
	}
	t.Cleanup(func() { _ = ns.Delete() })

	r := &rig{t: t, ns: ns, ifs: map[string]rigIface{}}
	for _, name := range []string{"cli0", "peer0", "far0"} {
		far := name[:len(name)-1] + "1"
		testenv.Must(t, ns.IP("link", "add", name, "address", serverMAC[name], "type", "veth", "peer", "name", far))
		testenv.Must(t, ns.IP("link", "set", name, "up"))
		testenv.Must(t, ns.IP("link", "set", far, "up"))
		for _, a := range rigAddrs[name] {
			testenv.Must(t, ns.IP("addr", "add", a, "dev", name, "nodad"))
		}
		for _, n := range rigNeighs[name] {
			testenv.Must(t, ns.IP("neigh", "replace", n, "lladdr", neighMAC[name], "dev", name, "nud", "permanent"))
		}
	}
	testenv.Must(t, ns.IP("link", "set", "peer0", "mtu", fmt.Sprint(peerMTU)))

	testenv.Must(t, ns.Do(func() error {
		for _, name := range []string{"cli0", "peer0", "far0"} {
			iface, err := net.InterfaceByName(name)
			if err != nil {
				return err
			}
			r.ifs[name] = rigIface{index: iface.Index, mac: iface.HardwareAddr}
			// bpf_fib_lookup asks as if from lo, which must forward (bpf/ip.h).
			if _, err := forwarding.Enable("lo"); err != nil {
				return err
			}
		}
		cfg := Config{
			ListenPorts:  []uint16{3478, 5349},
			RelayPortMin: 49152, RelayPortMax: 65535,
			RelayIPs: []netip.Addr{netip.MustParseAddr("10.10.2.1"), netip.MustParseAddr("fd10:2::1")},
		}
		if adjust != nil {
			adjust(&cfg)
		}
		e, err := Load(cfg)
		if err != nil {
			return err
		}
		r.engine = e
		// far0 is deliberately left out: routes through it must stay in the kernel.
		if err := e.AllowEgress(r.ifs["cli0"].index); err != nil {
			return err
		}
		return e.AllowEgress(r.ifs["peer0"].index)
	}))
	t.Cleanup(func() { _ = r.engine.Close() })
	return r
}

// xdpMD is struct xdp_md as BPF_PROG_TEST_RUN takes it.
type xdpMD struct {
	Data, DataEnd, DataMeta, IngressIfindex, RxQueueIndex, EgressIfindex uint32
}

// skBuff is struct __sk_buff up to gso_size, as BPF_PROG_TEST_RUN takes it
// (its offsets need no padding).
type skBuff struct {
	Len, PktType, Mark, QueueMapping, Protocol, VlanPresent, VlanTCI, VlanProto, Priority uint32
	IngressIfindex, Ifindex, TCIndex                                                      uint32
	CB                                                                                    [5]uint32
	Hash, TCClassid, Data, DataEnd, NapiID, Family, RemoteIP4, LocalIP4                   uint32
	RemoteIP6, LocalIP6                                                                   [4]uint32
	RemotePort, LocalPort, DataMeta                                                       uint32
	FlowKeys, Tstamp                                                                      uint64
	WireLen, GSOSegs                                                                      uint32
	Sk                                                                                    uint64
	GSOSize                                                                               uint32
	_                                                                                     uint32
}

// TC_ACT_UNSPEC (tcx: TCX_NEXT) as BPF_PROG_TEST_RUN reports it: the
// program's pass, which leaves the packet to the interface's other filters.
const tcActUnspec = 0xffffffff

// TC verdicts (linux/pkt_cls.h), reported as the XDP actions they stand
// for: a TC redirect serves both XDP_TX and XDP_REDIRECT. TC_ACT_OK would
// end the TC chain and is never expected.
var tcAsXDP = map[uint32]uint32{tcActUnspec: xdpPass, 2: xdpDrop, 7: xdpRedirect}

// run feeds one frame to the program as if it arrived on ingress.
func (r *rig) run(ingress string, in []byte) (uint32, []byte) {
	r.t.Helper()
	var ret uint32
	out := make([]byte, len(in)+512)
	testenv.Must(r.t, r.ns.Do(func() error {
		// One CPU for every run, so per-CPU state (spill, next hops) is one.
		var cpus unix.CPUSet
		cpus.Set(0)
		if err := unix.SchedSetaffinity(0, &cpus); err != nil {
			return err
		}
		idx := uint32(r.ifs[ingress].index)
		opts := &ebpf.RunOptions{Data: in, DataOut: out, Context: xdpMD{DataEnd: uint32(len(in)), IngressIfindex: idx}}
		prog := r.engine.Program()
		if r.tc {
			opts.Context, prog = skBuff{IngressIfindex: idx, Ifindex: idx}, r.engine.ProgramTC()
		}
		var err error
		ret, err = prog.Run(opts)
		out = opts.DataOut
		if r.tc {
			act, ok := tcAsXDP[ret]
			if !ok {
				return fmt.Errorf("TC verdict %d", ret)
			}
			ret = act
		}
		return err
	}))
	return ret, out
}

func (r *rig) outcomes() map[Outcome]Counter {
	r.t.Helper()
	o, err := r.engine.Outcomes()
	testenv.Must(r.t, err)
	return o
}

// expectOutcome runs fn and checks that exactly one packet was counted, under want.
func (r *rig) expectOutcome(want Outcome, fn func()) {
	r.t.Helper()
	before := r.outcomes()
	fn()
	after := r.outcomes()
	for _, o := range Outcomes() {
		d := after[o].Packets - before[o].Packets
		switch {
		case o == want && d != 1:
			r.t.Errorf("outcome %v counted %d packets, want 1", o, d)
		case o != want && d != 0:
			r.t.Errorf("outcome %v counted %d packets, want 0 (expected %v)", o, d, want)
		}
	}
}

// expectFast runs in on ingress and checks the outcome, the action and the
// emitted frame byte for byte.
func (r *rig) expectFast(t *testing.T, outcome Outcome, action uint32, ingress string, in, want []byte) {
	t.Helper()
	var ret uint32
	var out []byte
	r.expectOutcome(outcome, func() { ret, out = r.run(ingress, in) })
	if r.tc && action == xdpTX {
		action = xdpRedirect
	}
	if ret != action {
		t.Fatalf("action %d, want %d", ret, action)
	}
	requireFrame(t, out, want)
}

// toward builds the frame the program must emit on iface towards a neighbour.
func (r *rig) toward(iface string, u frame.UDP) []byte {
	u.SrcMAC = r.ifs[iface].mac
	u.DstMAC, _ = net.ParseMAC(neighMAC[iface])
	return u.Marshal()
}

// register tells the programs about iface as Attach would, with mac as its address.
func (r *rig) register(t testing.TB, iface string, a Attachment, mac []byte) {
	t.Helper()
	a.Index = r.ifs[iface].index
	testenv.Must(t, r.engine.registerIface(a, mac))
}

// from builds a frame arriving on iface from a neighbour.
func (r *rig) from(iface string, u frame.UDP) []byte {
	u.SrcMAC, _ = net.ParseMAC(neighMAC[iface])
	u.DstMAC = r.ifs[iface].mac
	if u.TTL == 0 {
		u.TTL = 57
	}
	return u.Marshal()
}

func requireFrame(t *testing.T, got, want []byte) {
	t.Helper()
	if _, err := frame.Parse(got); err != nil {
		t.Errorf("emitted frame does not parse: %v", err)
	}
	want = adoptIPv4ID(want, got)
	if !bytes.Equal(got, want) {
		t.Errorf("emitted frame differs\n got % x\nwant % x", got, want)
	}
}

// adoptIPv4ID gives an expected IPv4 frame without DF the identification
// the program chose (each route counts from a random start; TestIPv4ID
// checks the sequence), and recomputes its header checksum independently.
func adoptIPv4ID(want, got []byte) []byte {
	const ip = 14
	if len(want) < ip+20 || len(got) < ip+20 || want[12] != 0x08 || want[13] != 0x00 || want[ip+6]&0x40 != 0 {
		return want
	}
	w := bytes.Clone(want)
	copy(w[ip+4:ip+6], got[ip+4:ip+6])
	w[ip+10], w[ip+11] = 0, 0
	binary.BigEndian.PutUint16(w[ip+10:], frame.Checksum(w[ip:ip+20]))
	return w
}
