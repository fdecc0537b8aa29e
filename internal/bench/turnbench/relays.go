package turnbench

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/turnclient"
)

const (
	user     = "bench"
	password = "bench-password"
)

var (
	server = netip.AddrPortFrom(testbed.ServerClientIP4, 3478)
)

// Relay is one relay under test.
type Relay struct {
	Name string
	// Describe says what exactly runs, for the report.
	Describe string
	// turn is false for the baseline, which forwards plain UDP without TURN.
	turn  bool
	start func(e *env) (stop func() error, err error)
}

// Relays returns every relay kind, in report order.
func Relays() []Relay {
	n := runtime.NumCPU()
	ebrtc := func(extra ...string) func(*env) (func() error, error) {
		return func(e *env) (func() error, error) {
			// The generator's clients share one user and one address: no quota, no Allocate rate.
			args := append(testbed.TURNArgs(user+":"+password), "--user-quota", "0", "--allocate-rate", "0")
			r, err := e.Testbed.StartRelay(e.Bin, append(args, extra...)...)
			if err != nil {
				return nil, err
			}
			e.started = append(e.started, r.Pid())
			return func() error { return r.Stop(5 * time.Second) }, nil
		}
	}
	return []Relay{
		{Name: "ebrtc-xdp", Describe: "ebrtc turn --offload xdp, XDP fast path", turn: true, start: ebrtc("--offload", "xdp")},
		{Name: "ebrtc-tc", Describe: "ebrtc turn --offload tc, TC ingress fast path", turn: true, start: ebrtc("--offload", "tc")},
		{Name: "ebrtc-user-1", Describe: "ebrtc turn --offload off --udp-threads 1 (pion/turn, one socket)", turn: true,
			start: ebrtc("--offload", "off", "--udp-threads", "1")},
		{Name: fmt.Sprintf("ebrtc-user-%d", n), Describe: fmt.Sprintf("ebrtc turn --offload off --udp-threads %d (SO_REUSEPORT)", n), turn: true,
			start: ebrtc("--offload", "off", "--udp-threads", strconv.Itoa(n))},
		{Name: "coturn", Describe: coturnDescription(n), turn: true, start: startCoturn},
		{Name: "coturn+ebrtc-offload", Describe: coturnDescription(n) + ", with ebrtc offload beside it", turn: true, start: startCoturnOffload},
		{Name: "baseline", Describe: "plain kernel IP forwarding between the same veths, no TURN", start: startBaseline},
	}
}

// coturn 4.6 has no recvmmsg/sendmmsg switch: its fastest UDP setup is one
// relay thread per CPU on SO_REUSEPORT sockets, with logging and every other
// listener off.
func coturnDescription(n int) string {
	return fmt.Sprintf("coturn turnserver, %d relay threads, UDP only, no logging", n)
}

func startCoturn(e *env) (func() error, error) {
	var extra []string
	if e.Isolated() {
		extra = append(extra, "relay-threads=1") // one core: one thread
	}
	p, err := e.Testbed.StartCoturn(e.WorkDir, e.Log, user, password, extra...)
	if err != nil {
		return nil, err
	}
	e.started = append(e.started, p.Pid())
	return func() error { return p.Stop(5 * time.Second) }, nil
}

// startCoturnOffload runs coturn and, beside it, ebrtc offload, which learns
// the channels the flows bind and moves them to XDP.
func startCoturnOffload(e *env) (func() error, error) {
	stopCoturn, err := startCoturn(e)
	if err != nil {
		return nil, err
	}
	off, err := e.Testbed.StartRelay(e.Bin, "offload", "--iface", testbed.ServerCliIface, "--relay-iface", testbed.ServerPeerIface,
		"--relay-ip", testbed.ServerPeerIP4.String(), "--pin-dir", "", "--control-socket", "")
	if err != nil {
		_ = stopCoturn()
		return nil, err
	}
	e.started = append(e.started, off.Pid())
	return func() error { return errors.Join(off.Stop(5*time.Second), stopCoturn()) }, nil
}

func startBaseline(e *env) (func() error, error) {
	if _, err := e.Testbed.Server.Output("sysctl", "-qw", "net.ipv4.ip_forward=1"); err != nil {
		return nil, err
	}
	return func() error {
		_, err := e.Testbed.Server.Output("sysctl", "-qw", "net.ipv4.ip_forward=0")
		return err
	}, nil
}

// flow is one client and its peer, with a direction each way.
type flow struct {
	client, peer *net.UDPConn
	fwd, rev     *bench.Direction
	turn         *turnclient.Client
}

func (f *flow) close() {
	if f.turn != nil {
		_ = f.turn.Release()
	}
	f.client.Close()
	f.peer.Close()
}

// setupFlows opens n client/peer pairs; through a TURN relay each client
// allocates and binds a channel to its peer.
func setupFlows(tb *testbed.Testbed, r Relay, n int) ([]*flow, error) {
	var flows []*flow
	fail := func(err error) ([]*flow, error) {
		for _, f := range flows {
			f.close()
		}
		return nil, err
	}
	for i := range n {
		c, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
		if err != nil {
			return fail(err)
		}
		p, err := testbed.ListenUDP(tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0))
		if err != nil {
			c.Close()
			return fail(err)
		}
		f := &flow{client: c, peer: p}
		flows = append(flows, f)
		peerAddr := p.LocalAddr().(*net.UDPAddr).AddrPort()
		clientAddr := c.LocalAddr().(*net.UDPAddr).AddrPort()
		f.fwd = &bench.Direction{Send: ipv4.NewPacketConn(c), Recv: ipv4.NewPacketConn(p), Flow: uint32(2 * i)}
		f.rev = &bench.Direction{Send: ipv4.NewPacketConn(p), Recv: ipv4.NewPacketConn(c), Flow: uint32(2*i + 1)}
		if !r.turn {
			f.fwd.Dst, f.rev.Dst = net.UDPAddrFromAddrPort(peerAddr), net.UDPAddrFromAddrPort(clientAddr)
			continue
		}
		if f.turn, err = turnclient.Allocate(c, server, user, password, false); err != nil {
			return fail(fmt.Errorf("%s: %w", r.Name, err))
		}
		const channel = 0x4000
		if err := f.turn.ChannelBind(peerAddr, channel); err != nil {
			return fail(fmt.Errorf("%s: %w", r.Name, err))
		}
		f.fwd.Dst, f.fwd.Prefix = net.UDPAddrFromAddrPort(server), []byte{channel >> 8, channel & 0xff, 0, 0}
		f.rev.Dst, f.rev.Strip = net.UDPAddrFromAddrPort(f.turn.Relay), 4
	}
	return flows, nil
}
