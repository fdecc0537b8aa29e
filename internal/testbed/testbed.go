// Package testbed builds the three-namespace network that end-to-end tests,
// benchmarks and the demo run on:
//
//	client ns                server ns                  peer ns
//	  cli  <--veth-->  eth-cli    eth-peer  <--veth-->  peer
//	10.201.1.2       10.201.1.1   10.201.2.1          10.201.2.2
//	fd00:201:1::2    fd00:201:1::1 fd00:201:2::1      fd00:201:2::2
//
// The server ns holds the relay under test; clients reach the relay
// addresses (10.201.2.1) through it. Every address lives only inside these
// namespaces, which Close deletes.
package testbed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/offload"
)

// Fixed addresses of the testbed.
var (
	ClientIP4       = netip.MustParseAddr("10.201.1.2")
	ServerClientIP4 = netip.MustParseAddr("10.201.1.1")
	ServerPeerIP4   = netip.MustParseAddr("10.201.2.1")
	PeerIP4         = netip.MustParseAddr("10.201.2.2")
	ClientIP6       = netip.MustParseAddr("fd00:201:1::2")
	ServerClientIP6 = netip.MustParseAddr("fd00:201:1::1")
	ServerPeerIP6   = netip.MustParseAddr("fd00:201:2::1")
	PeerIP6         = netip.MustParseAddr("fd00:201:2::2")

	// Prefixes is what a relay in the testbed must be told to allow as peers.
	Prefixes = []string{"10.201.0.0/16", "fd00:201::/32"}
)

// Interface names inside the namespaces.
const (
	ClientIface     = "cli"
	ServerCliIface  = "eth-cli"
	ServerPeerIface = "eth-peer"
	PeerIface       = "peer"
)

// Testbed is a running set of namespaces.
type Testbed struct {
	Client, Server, Peer *netns.NS
	extra                []*netns.NS // AddPeer's and AddClient's
	links                []Link
	passes               []io.Closer
	opts                 Options
}

// Link is a veth between the server namespace and a far one.
type Link struct {
	ServerIface string
	Far         *netns.NS
	FarIface    string
}

// Links are the server's veths: to the client, to the peer, then those
// AddPeer and AddClient added.
func (tb *Testbed) Links() []Link { return slices.Clone(tb.links) }

// Options say how the veths are prepared.
type Options struct {
	// Unprepared leaves the far ends as a container host does: no XDP
	// program on them, and TX checksum offload on, so their datagrams
	// arrive with partial checksums (CHECKSUM_PARTIAL). The default
	// prepares them as a wire would: full checksums, and XDP running so
	// that frames sent into the veth from XDP are received.
	Unprepared bool
	// FarXDP runs XDP on the far ends of an Unprepared testbed, whose
	// datagrams still arrive with partial checksums.
	FarXDP bool
	// FullChecksums turns TX checksum offload off at the far ends of an
	// Unprepared testbed, which still run no XDP.
	FullChecksums bool
	// ServerTxChecksumOff turns TX checksum offload off on the server's
	// ends, so the kernel finishes every partial checksum the relay sends
	// (at the place the skb points at) and the receivers verify it.
	ServerTxChecksumOff bool
}

// New builds the prepared testbed. On error everything created so far is removed.
func New() (*Testbed, error) { return NewWith(Options{}) }

// NewWith builds a testbed prepared as opts say.
func NewWith(opts Options) (*Testbed, error) {
	tb := &Testbed{opts: opts}
	err := tb.build()
	if err != nil {
		_ = tb.Close()
		return nil, err
	}
	return tb, nil
}

func (tb *Testbed) build() error {
	var err error
	for _, ns := range []**netns.NS{&tb.Client, &tb.Server, &tb.Peer} {
		if *ns, err = netns.New("ebrtc-tb"); err != nil {
			return err
		}
	}
	if err := tb.connect(tb.Client, ClientIface, ServerCliIface, 1); err != nil {
		return err
	}
	return tb.connect(tb.Peer, PeerIface, ServerPeerIface, 2)
}

// connect links ns to the server ns over a veth on subnet 10.201.N.0/24 and
// fd00:201:N::/64: the server end is .1, the far end .2 with a default route.
func (tb *Testbed) connect(outer *netns.NS, outerName, inner string, subnet int) error {
	v4, v6 := fmt.Sprintf("10.201.%d.", subnet), fmt.Sprintf("fd00:201:%d::", subnet)
	steps := []func() error{
		func() error {
			return tb.Server.IP("link", "add", inner, "type", "veth", "peer", "name", outerName, "netns", outer.Name)
		},
		func() error { return tb.Server.IP("addr", "add", v4+"1/24", "dev", inner, "nodad") },
		func() error { return tb.Server.IP("addr", "add", v6+"1/64", "dev", inner, "nodad") },
		func() error { return outer.IP("addr", "add", v4+"2/24", "dev", outerName, "nodad") },
		func() error { return outer.IP("addr", "add", v6+"2/64", "dev", outerName, "nodad") },
		func() error { return tb.Server.IP("link", "set", inner, "up") },
		func() error { return outer.IP("link", "set", outerName, "up") },
		func() error { return outer.IP("route", "add", "default", "via", v4+"1") },
		func() error { return outer.IP("route", "add", "default", "via", v6+"1") },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return err
		}
	}
	tb.links = append(tb.links, Link{ServerIface: inner, Far: outer, FarIface: outerName})
	if tb.opts.ServerTxChecksumOff {
		if err := tb.Server.Do(func() error { return netns.DisableTxChecksum(inner) }); err != nil {
			return err
		}
	}
	fullChecksums := !tb.opts.Unprepared || tb.opts.FullChecksums
	farXDP := !tb.opts.Unprepared || tb.opts.FarXDP
	return outer.Do(func() error {
		// Full checksums on what the end hosts send, as on a real wire.
		if fullChecksums {
			if err := netns.DisableTxChecksum(outerName); err != nil {
				return err
			}
		}
		if !farXDP {
			return nil
		}
		// XDP frames sent into the veth reach the outer end only if it runs XDP.
		c, err := offload.AttachPass(outerName)
		if err == nil {
			tb.passes = append(tb.passes, c)
		}
		return err
	})
}

// AddPeer adds another peer namespace behind a server interface of its own
// (eth-peerN, 10.201.N+1.0/24), for relays with several relay interfaces.
// It returns the namespace, the peer's IPv4 address and the server interface.
func (tb *Testbed) AddPeer(n int) (*netns.NS, netip.Addr, string, error) {
	return tb.addFar(PeerIface, fmt.Sprintf("%s%d", ServerPeerIface, n), n+1)
}

// AddClient adds another client namespace behind a server interface of its
// own (eth-cliN, 10.201.100+N.0/24 and fd00:201:100+N::/64; the far end is
// named as the first client's, cli), for loads a single veth would limit.
// It returns the namespace, the client's IPv4 address and the server
// interface.
func (tb *Testbed) AddClient(n int) (*netns.NS, netip.Addr, string, error) {
	return tb.addFar(ClientIface, fmt.Sprintf("%s%d", ServerCliIface, n), 100+n)
}

// addFar adds a namespace linked to the server over subnet (connect).
func (tb *Testbed) addFar(farIface, serverIface string, subnet int) (*netns.NS, netip.Addr, string, error) {
	ns, err := netns.New("ebrtc-tb")
	if err != nil {
		return nil, netip.Addr{}, "", err
	}
	tb.extra = append(tb.extra, ns)
	if err := tb.connect(ns, farIface, serverIface, subnet); err != nil {
		return nil, netip.Addr{}, "", err
	}
	return ns, netip.MustParseAddr(fmt.Sprintf("10.201.%d.2", subnet)), serverIface, nil
}

// Close removes the namespaces and with them every interface and process
// socket in them.
func (tb *Testbed) Close() error {
	var errs []error
	for _, c := range tb.passes {
		errs = append(errs, c.Close())
	}
	for _, ns := range append([]*netns.NS{tb.Client, tb.Server, tb.Peer}, tb.extra...) {
		if ns != nil {
			errs = append(errs, ns.Delete())
		}
	}
	return errors.Join(errs...)
}

// socketBuffer is large enough that test endpoints, not their socket
// buffers, never decide the loss of a paced burst.
const socketBuffer = 4 << 20

// LargeBuffers gives a socket 4 MiB buffers (net.ListenConfig.Control).
func LargeBuffers(_, _ string, c syscall.RawConn) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		// The FORCE variants ignore net.core.[rw]mem_max (we are root).
		serr = errors.Join(
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, socketBuffer),
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, socketBuffer))
	})
	return errors.Join(err, serr)
}

// ListenUDP opens a UDP socket inside ns with large buffers.
func ListenUDP(ns *netns.NS, addr netip.AddrPort) (*net.UDPConn, error) {
	var conn *net.UDPConn
	err := ns.Do(func() error {
		lc := net.ListenConfig{Control: LargeBuffers}
		pc, err := lc.ListenPacket(context.Background(), "udp", addr.String())
		if err != nil {
			return err
		}
		conn = pc.(*net.UDPConn)
		return nil
	})
	return conn, err
}

// DialTCP connects from inside ns (for metrics endpoints in the server ns).
func DialTCP(ns *netns.NS, addr string) (net.Conn, error) {
	var conn net.Conn
	err := ns.Do(func() error {
		var err error
		conn, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	})
	return conn, err
}

// DialContextIn is DialTCP as an http.Transport's DialContext: HTTP
// clients that talk to servers inside ns.
func DialContextIn(ns *netns.NS) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(_ context.Context, _, addr string) (net.Conn, error) { return DialTCP(ns, addr) }
}

// Process is a command running inside a namespace, stopped by Stop.
type Process struct {
	cmd  *exec.Cmd
	done chan error
}

// spawn runs functions on one OS thread that never exits. Pdeathsig fires
// when the thread that forked a child exits, not the process; netns.Do ends
// threads on purpose, and Go may have forked on a thread it later hands to
// Do. Forking only here keeps children alive exactly as long as the process.
var spawn = func() chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread()
		for f := range ch {
			f()
		}
	}()
	return ch
}()

// Start runs a command inside ns with its output going to out. It is killed
// if this process dies.
func Start(ns *netns.NS, out io.Writer, name string, args ...string) (*Process, error) {
	cmd := ns.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	spawn <- func() { errc <- cmd.Start() }
	if err := <-errc; err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{cmd: cmd, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// Exited reports whether the process has ended (and how), without waiting.
func (p *Process) Exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err
		return true, err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, waits up to the timeout, then kills.
func (p *Process) Stop(timeout time.Duration) error {
	if exited, err := p.Exited(); exited {
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("%s did not stop within %v: killed", p.cmd.Path, timeout)
	}
}

// Pid is the process id (ip netns exec replaces itself with the command).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// CPUTime is the user plus system CPU time the process has used so far.
func (p *Process) CPUTime() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.Pid()))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name; utime and stime are 14 and 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", p.Pid())
	}
	utime, _ := strconv.ParseUint(f[11], 10, 64)
	stime, _ := strconv.ParseUint(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc.
const clockTicks = 100
