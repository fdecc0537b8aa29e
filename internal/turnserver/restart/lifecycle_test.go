package restart

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pion/turn/v5"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/handover"
	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The test binary is its own successor when Upgrade starts it.
const (
	successorEnv = "RESTART_TEST_SUCCESSOR" // "serve" or "fail"
	successorUDP = "RESTART_TEST_UDP"       // the UDP listener it serves
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(successorEnv); mode != "" {
		os.Exit(successor(mode))
	}
	os.Exit(m.Run())
}

// successor takes a hand-over: "serve" listens at successorUDP, answers
// the datagram that waited there through the hand-over and says it serves;
// "fail" gives up once it has the state.
func successor(mode string) int {
	l := New(Config{Log: &testLog{}}, &fakeHost{})
	if err := l.Inherit(); err != nil {
		fmt.Fprintln(os.Stderr, "successor:", err)
		return 2
	}
	if mode == "fail" {
		l.StartFailed(errors.New("no luck"), func() error { return nil })
		return 0
	}
	addr, err := netip.ParseAddrPort(os.Getenv(successorUDP))
	if err != nil {
		return 3
	}
	conns, err := l.ListenUDP("4", addr, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "successor:", err)
		return 4
	}
	l.TakeOver()
	// Read directly: the gate takes an expired deadline for its own.
	_ = conns[0].SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 100)
	n, from, err := conns[0].ReadFrom(buf)
	if err != nil {
		return 5
	}
	if _, err := conns[0].WriteTo(append([]byte("successor: "), buf[:n]...), from); err != nil {
		return 6
	}
	l.Serving()
	return 0
}

// fakeHost is the server as a Lifecycle reaches it: it exports what the
// test gives it and records what it is asked.
type fakeHost struct {
	exported        []Allocation
	users           map[string]admin.User
	relays          []net.PacketConn
	importErr       func(Allocation) error // pion refuses an allocation
	onImport        func(Allocation)
	onStopEndpoints func()

	mu            sync.Mutex
	calls         []string
	asked         []Allocation // every Import
	imported      []Allocation // those that succeeded
	importedUsers map[string]admin.User
}

// newFakeHost closes, when the test ends, the relay sockets it imports.
func newFakeHost(t *testing.T) *fakeHost {
	h := &fakeHost{}
	t.Cleanup(func() {
		for _, a := range h.imported {
			if a.Conn != nil {
				a.Conn.Close()
			}
		}
	})
	return h
}

func (h *fakeHost) record(call string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call)
}

func (h *fakeHost) called() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.calls)
}

func (h *fakeHost) Engine() *offload.Engine { return nil }

func (h *fakeHost) Export() ([]Allocation, map[string]admin.User) { return h.exported, h.users }

// Import fails as the server's does: closing a.Conn.
func (h *fakeHost) Import(a Allocation) error {
	if h.onImport != nil {
		h.onImport(a)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked = append(h.asked, a)
	if h.importErr != nil {
		if err := h.importErr(a); err != nil {
			if a.Conn != nil {
				a.Conn.Close()
			}
			return err
		}
	}
	h.imported = append(h.imported, a)
	return nil
}

func (h *fakeHost) ImportUsers(users map[string]admin.User) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.importedUsers = users
}

func (h *fakeHost) RelayConns() []net.PacketConn        { return h.relays }
func (h *fakeHost) Installed() map[offload.Channel]bool { return nil }
func (h *fakeHost) DetachFastPath()                     { h.record("DetachFastPath") }
func (h *fakeHost) AttachFastPath()                     { h.record("AttachFastPath") }
func (h *fakeHost) StartEndpoints()                     { h.record("StartEndpoints") }

func (h *fakeHost) StopEndpoints() {
	h.record("StopEndpoints")
	if h.onStopEndpoints != nil {
		h.onStopEndpoints()
	}
}

// testLog keeps what it is told.
type testLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *testLog) log(level, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, level+": "+msg)
}

func (l *testLog) Trace(msg string)             { l.log("trace", msg) }
func (l *testLog) Tracef(f string, args ...any) { l.log("trace", fmt.Sprintf(f, args...)) }
func (l *testLog) Debug(msg string)             { l.log("debug", msg) }
func (l *testLog) Debugf(f string, args ...any) { l.log("debug", fmt.Sprintf(f, args...)) }
func (l *testLog) Info(msg string)              { l.log("info", msg) }
func (l *testLog) Infof(f string, args ...any)  { l.log("info", fmt.Sprintf(f, args...)) }
func (l *testLog) Warn(msg string)              { l.log("warn", msg) }
func (l *testLog) Warnf(f string, args ...any)  { l.log("warn", fmt.Sprintf(f, args...)) }
func (l *testLog) Error(msg string)             { l.log("error", msg) }
func (l *testLog) Errorf(f string, args ...any) { l.log("error", fmt.Sprintf(f, args...)) }
func (l *testLog) has(level, substr string) bool {
	return strings.Contains(l.String(), level+": "+substr)
}
func (l *testLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// guardLog stands in for the source guard: which sockets it was attached to.
type guardLog struct {
	mu     sync.Mutex
	inodes []uint64
}

func (g *guardLog) attach(network, address string, c syscall.RawConn) error {
	var st unix.Stat_t
	var err error
	if cerr := c.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &st) }); cerr != nil {
		return cerr
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inodes = append(g.inodes, st.Ino)
	return err
}

func (g *guardLog) attached() []uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.inodes)
}

// inode names a socket whatever descriptor (dup, SCM_RIGHTS) reaches it.
func inode(t *testing.T, c any) uint64 {
	t.Helper()
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("%T has no descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if cerr := rc.Control(func(fd uintptr) { err = unix.Fstat(int(fd), &st) }); cerr != nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// dtlsListener stands in for a dtls:// listener, which a hand-over closes.
type dtlsListener struct{ closes atomic.Int32 }

func (d *dtlsListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (d *dtlsListener) Close() error              { d.closes.Add(1); return nil }
func (d *dtlsListener) Addr() net.Addr            { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5349} }

// predecessor stands in for the process that started this one
// (handover.Start): on "ready" it sends the files, then the state, as
// Successor.Send does, closes its copies, as handTo does, and hears the
// successor's last word.
type predecessor struct {
	conn *net.UnixConn
	sent chan error
}

func startPredecessor(t *testing.T, state []byte, files []*os.File) *predecessor {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "predecessor")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		unix.Close(fds[1])
		t.Fatal(err)
	}
	p := &predecessor{conn: c.(*net.UnixConn), sent: make(chan error, 1)}
	t.Cleanup(func() { p.conn.Close() })
	t.Setenv(handover.EnvFD, strconv.Itoa(fds[1])) // Inherit takes it
	go func() {
		p.sent <- p.send(state, files)
		closeFiles(files)
	}()
	return p
}

func (p *predecessor) send(state []byte, files []*os.File) error {
	_ = p.conn.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64)
	n, _, _, _, err := p.conn.ReadMsgUnix(buf, nil)
	if err != nil {
		return err
	}
	if string(buf[:n]) != "ready" {
		return fmt.Errorf("successor said %q, want ready", buf[:n])
	}
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			// Not f.Fd: it would make the shared socket blocking.
			rc, err := f.SyscallConn()
			if err != nil {
				return err
			}
			if err := rc.Control(func(fd uintptr) { fds[i] = int(fd) }); err != nil {
				return err
			}
		}
		if _, _, err := p.conn.WriteMsgUnix([]byte("files"), unix.UnixRights(fds...), nil); err != nil {
			return err
		}
	}
	memfd, err := unix.MemfdCreate("state", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(memfd)
	if _, err := unix.Write(memfd, state); err != nil {
		return err
	}
	_, _, err = p.conn.WriteMsgUnix([]byte("state"), unix.UnixRights(memfd), nil)
	return err
}

// last is the successor's last word: "serving" or "failed:<why>".
func (p *predecessor) last(t *testing.T) string {
	t.Helper()
	select {
	case err := <-p.sent:
		if err != nil {
			t.Fatalf("predecessor: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("predecessor: the state not sent after 10 s")
	}
	_ = p.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	n, _, _, _, err := p.conn.ReadMsgUnix(buf, nil)
	if err != nil {
		t.Fatalf("successor said nothing: %v", err)
	}
	return string(buf[:n])
}

// heard says whether the successor has said anything since "ready" (the
// message is left for last).
func (p *predecessor) heard(t *testing.T) bool {
	t.Helper()
	rc, err := p.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var recvErr error
	if err := rc.Control(func(fd uintptr) {
		_, _, recvErr = unix.Recvfrom(int(fd), make([]byte, 1), unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}); err != nil {
		t.Fatal(err)
	}
	return recvErr == nil
}

// newSuccessor is a lifecycle that lets go, when the test ends, of what
// it inherited and still holds.
func newSuccessor(t *testing.T, cfg Config, host Host) *Lifecycle {
	l := New(cfg, host)
	t.Cleanup(func() { l.inherited.failed(errors.New("test over")) })
	return l
}

func marshal(t *testing.T, st savedState) []byte {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unusedUDPAddr is a free UDP port on 127.0.0.1 (free when it returns).
func unusedUDPAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	c := testenv.LoopbackUDP(t)
	addr := c.LocalAddr().(*net.UDPAddr).AddrPort()
	c.Close()
	return addr
}

func unusedTCPAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	ln.Close()
	return addr
}

func addrOf(c net.PacketConn) netip.AddrPort { return c.LocalAddr().(*net.UDPAddr).AddrPort() }

func closeAtEnd[C interface{ Close() error }](t *testing.T, cs ...C) {
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
}

// importsWithTheGateHeld fails t when host imports an allocation while
// l's read gate is open: a client's datagram would find none.
func importsWithTheGateHeld(t *testing.T, host *fakeHost, l *Lifecycle) {
	host.onImport = func(Allocation) {
		if !l.gate.held.Load() {
			t.Error("an allocation imported with the gate open: a client's datagram would find none")
		}
	}
}

// inheritAndListen runs l's Inherit and takes its UDP socket at addr,
// closed at the test's end.
func inheritAndListen(t *testing.T, l *Lifecycle, addr netip.AddrPort) []*net.UDPConn {
	t.Helper()
	if err := l.Inherit(); err != nil {
		t.Fatal(err)
	}
	conns, err := l.ListenUDP("4", addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, conns...)
	return conns
}

// dupFile is a descriptor of c's socket, as a predecessor sends it.
func dupFile(t *testing.T, c interface{ File() (*os.File, error) }) *os.File {
	t.Helper()
	f, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func sendTo(t *testing.T, from *net.UDPConn, to net.Addr, msg string) {
	t.Helper()
	if _, err := from.WriteTo([]byte(msg), to); err != nil {
		t.Fatal(err)
	}
}

// receive reads c directly (not a gated socket: the gate owns their
// deadlines).
func receive(t *testing.T, c net.PacketConn) (string, net.Addr) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1500)
	n, from, err := c.ReadFrom(buf)
	if err != nil {
		t.Fatalf("nothing read from %v: %v", c.LocalAddr(), err)
	}
	return string(buf[:n]), from
}

// readThrough reads c through g until the read fails; when the test ends
// c is closed and g released, so the reader ends wherever it waits.
func readThrough(t *testing.T, g *Gate, c net.PacketConn) <-chan string {
	out := make(chan string, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r := g.Reader()
		buf := make([]byte, 1500)
		for {
			n, _, err := r.Read(c, buf)
			if err != nil {
				return
			}
			out <- string(buf[:n])
		}
	}()
	t.Cleanup(func() {
		c.Close()
		g.release(nil)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Error("a gated reader did not end")
		}
	})
	return out
}

func next(t *testing.T, reads <-chan string) string {
	t.Helper()
	select {
	case s := <-reads:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("nothing read through the gate after 10 s")
		return ""
	}
}

// nothingFrom: a held gate lets nothing through while the test looks.
func nothingFrom(t *testing.T, reads <-chan string) {
	t.Helper()
	select {
	case s := <-reads:
		t.Fatalf("%q read through a held gate", s)
	case <-time.After(100 * time.Millisecond):
	}
}

func wakeOf(cs ...interface{ SetReadDeadline(time.Time) error }) func() []wakeFunc {
	return func() []wakeFunc {
		var out []wakeFunc
		for _, c := range cs {
			out = append(out, c.SetReadDeadline)
		}
		return out
	}
}

// hold wakes a reader blocked in a read, and a reader of a socket opened
// meanwhile (not woken: no deadline) finds the gate closed; what arrives
// while the gate is held waits in the sockets until release.
func TestGateHoldsReadersUntilReleased(t *testing.T) {
	g := newGate()
	conn, opened, client := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	reads := readThrough(t, g, conn)
	sendTo(t, client, conn.LocalAddr(), "open")
	if got := next(t, reads); got != "open" {
		t.Fatalf("read %q, want open", got)
	}
	wake := wakeOf(conn)
	if err := g.hold(wake, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	readsOpened := readThrough(t, g, opened)
	sendTo(t, client, conn.LocalAddr(), "held")
	sendTo(t, client, opened.LocalAddr(), "held, opened meanwhile")
	nothingFrom(t, reads)
	nothingFrom(t, readsOpened)
	g.release(wakeOf(conn, opened)())
	if got := next(t, reads); got != "held" {
		t.Fatalf("read %q after release, want held", got)
	}
	if got := next(t, readsOpened); got != "held, opened meanwhile" {
		t.Fatalf("read %q after release, want held, opened meanwhile", got)
	}
}

// A reader handling a datagram keeps hold waiting (until its timeout);
// its next read ends the handling and waits at the gate.
func TestGateHoldWaitsForADatagramBeingHandled(t *testing.T) {
	g := newGate()
	conn, client := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	t.Cleanup(func() { g.release(nil) }) // before conn closes: a parked reader ends
	wake := wakeOf(conn)
	r := g.Reader()
	reads := make(chan string, 1)
	read := func() {
		buf := make([]byte, 100)
		n, _, err := r.Read(conn, buf)
		if err != nil {
			reads <- err.Error()
			return
		}
		reads <- string(buf[:n])
	}
	sendTo(t, client, conn.LocalAddr(), "one")
	go read()
	if got := next(t, reads); got != "one" {
		t.Fatalf("read %q, want one", got)
	}
	// "one" is being handled.
	if err := g.hold(wake, 20*time.Millisecond); err == nil || err.Error() != "hand-over: readers still busy" {
		t.Fatalf("hold while a datagram is handled: %v, want readers still busy", err)
	}
	g.release(wake())

	held := make(chan error, 1)
	go func() { held <- g.hold(wake, 5*time.Second) }()
	select {
	case err := <-held:
		t.Fatalf("hold returned (%v) while a datagram was handled", err)
	case <-time.After(50 * time.Millisecond):
	}
	go read()
	select {
	case err := <-held:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("hold still waiting after the reader's next read")
	}
	sendTo(t, client, conn.LocalAddr(), "two")
	nothingFrom(t, reads)
	g.release(wake())
	if got := next(t, reads); got != "two" {
		t.Fatalf("read %q after release, want two", got)
	}
}

// A read's own error (not the gate's deadline) goes to the reader, which
// is then not busy: a closed socket does not stop a hand-over.
func TestGateReaderOfAClosedSocketIsNotBusy(t *testing.T) {
	g := newGate()
	conn := testenv.LoopbackUDP(t)
	r := g.Reader()
	failed := make(chan error, 1)
	go func() {
		_, _, err := r.Read(conn, make([]byte, 100))
		failed <- err
	}()
	conn.Close()
	select {
	case err := <-failed:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read of a closed socket: %v, want net.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read of a closed socket did not return")
	}
	if err := g.hold(wakeOf(), time.Second); err != nil {
		t.Fatal(err)
	}
}

// hold wakes an Accept; a connection made while the gate is held waits in
// the backlog until release.
func TestGateHoldsAccept(t *testing.T) {
	g := newGate()
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.release(nil) })
	closeAtEnd(t, ln)
	accepted := make(chan net.Conn, 1)
	go func() {
		for {
			c, err := g.Accept(ln)
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	wake := func() []wakeFunc { return []wakeFunc{ln.SetDeadline} }
	if err := g.hold(wake, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	dialed, err := net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, dialed)
	select {
	case c := <-accepted:
		c.Close()
		t.Fatal("a connection accepted through a held gate")
	case <-time.After(100 * time.Millisecond):
	}
	g.release(wake())
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("nothing accepted after release")
	}
}

// A nil gate (dtls listeners, AF_XDP sockets) reads and accepts directly.
func TestNoGate(t *testing.T) {
	var g *Gate
	conn, client := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	sendTo(t, client, conn.LocalAddr(), "direct")
	r := g.Reader()
	buf := make([]byte, 100)
	if n, _, err := r.Read(conn, buf); err != nil || string(buf[:n]) != "direct" {
		t.Fatalf("read %q, %v; want direct", buf[:n], err)
	}
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, ln)
	dialed, err := net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, dialed)
	_ = ln.SetDeadline(time.Now().Add(10 * time.Second)) // ungated: ours to set
	c, err := g.Accept(ln)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

var expires = time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)

// allocationOn is an allocation of client's at the config-th UDP
// listener, relayed on relay and advertised elsewhere.
func allocationOn(relay *net.UDPConn, client net.Addr, config int) Allocation {
	peer := net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:9"))
	return Allocation{
		AllocationState: turn.AllocationState{
			PacketConnConfig: config, ClientAddr: client,
			RelayAddr: net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:7")),
			Username:  "alice", Realm: "ebrtc", AddressFamily: turn.RequestedAddressFamilyIPv4, Expires: expires,
			Permissions: []turn.PermissionState{{Addr: peer, Expires: expires.Add(-time.Minute)}},
			Channels:    []turn.ChannelBindState{{Number: 0x4001, Peer: peer, Expires: expires.Add(-2 * time.Minute)}},
		},
		Conn: relay, Wire: addrOf(relay),
		Slow:        admin.Flow{ToPeer: admin.Counter{Packets: 3, Bytes: 300}},
		RetiredFast: admin.Flow{ToClient: admin.Counter{Packets: 5, Bytes: 500}},
	}
}

var users = map[string]admin.User{"alice": {Name: "alice", Allocations: 2, Slow: admin.Flow{ToPeer: admin.Counter{Packets: 7, Bytes: 700}}}}

// describe is what an imported allocation holds, but its sockets.
func describe(a Allocation) string {
	s := fmt.Sprintf("listener %d client %v server %v relay %v wire %v user %s realm %s family %d expires %s slow %+v retired %+v",
		a.PacketConnConfig, a.ClientAddr, a.ServerAddr, a.RelayAddr, a.Wire, a.Username, a.Realm, a.AddressFamily,
		a.Expires.UTC().Format(time.RFC3339Nano), a.Slow, a.RetiredFast)
	for _, p := range a.Permissions {
		s += fmt.Sprintf(" permission %v %s", p.Addr, p.Expires.UTC().Format(time.RFC3339Nano))
	}
	for _, c := range a.Channels {
		s += fmt.Sprintf(" channel %#x %v %s", c.Number, c.Peer, c.Expires.UTC().Format(time.RFC3339Nano))
	}
	return s
}

// A hand-over sends every listening and relay socket with the state
// saying which is which, once the readers are held, the endpoints stopped,
// the dtls listeners closed and pion's events off the fast path. The
// successor listens on the very sockets (as many as the predecessor had on
// a UDP listener, not as it is configured), attaches its source guard,
// gives pion the allocations on their relay sockets with all they hold
// (its readers held until then), and lets the predecessor go once systemd
// has its pid. What arrived meanwhile waits in the sockets.
func TestHandOver(t *testing.T) {
	udpAddr, tcpAddr := unusedUDPAddr(t), unusedTCPAddr(t)
	client, relay := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	alloc := allocationOn(relay, client.LocalAddr(), 1)
	oldHost := newFakeHost(t)
	oldHost.exported, oldHost.users, oldHost.relays = []Allocation{alloc}, users, []net.PacketConn{relay}
	old := New(Config{Log: &testLog{}}, oldHost)
	udp, err := old.ListenUDP("4", udpAddr, 2)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, udp...)
	ln, err := old.ListenTCP("tcp", "4", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, ln)
	dtls := &dtlsListener{}
	old.AddDTLS(dtls)
	sockets := []uint64{inode(t, udp[0]), inode(t, udp[1]), inode(t, ln), inode(t, relay)}

	// Left unread, for the successor.
	sendTo(t, client, relay.LocalAddr(), "to the relay")
	dialed, err := net.DialTimeout("tcp4", tcpAddr.String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, dialed)

	st, files, err := old.freeze(true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := oldHost.called(), []string{"StopEndpoints", "DetachFastPath"}; !slices.Equal(got, want) {
		t.Errorf("freeze asked the server for %v, want %v", got, want)
	}
	if !old.gate.held.Load() || dtls.closes.Load() != 1 {
		t.Errorf("after freeze: gate held %v, dtls listener closed %d times; want held, once", old.gate.held.Load(), dtls.closes.Load())
	}
	wantListeners := []savedListener{{"udp", udpAddr, 0, 0}, {"udp", udpAddr, 1, 1}, {"tcp", tcpAddr, 0, 2}}
	if !slices.Equal(st.Listeners, wantListeners) {
		t.Errorf("listeners %+v, want %+v", st.Listeners, wantListeners)
	}
	if len(st.Allocations) != 1 || st.Allocations[0].File != 3 || st.Allocations[0].Listener != 1 {
		t.Fatalf("allocations %+v, want one at listener 1 on file 3", st.Allocations)
	}
	var sent []uint64
	for _, f := range files {
		sent = append(sent, inode(t, f))
	}
	if !slices.Equal(sent, sockets) {
		t.Fatalf("files of sockets %v, want %v (udp, udp, tcp, relay)", sent, sockets)
	}

	notify := notifySocket(t)
	p := startPredecessor(t, marshal(t, st), files)
	// The predecessor exits: the successor's descriptors keep the sockets.
	for _, c := range []interface{ Close() error }{udp[0], udp[1], ln, relay} {
		c.Close()
	}

	host, guard, log := newFakeHost(t), &guardLog{}, &testLog{}
	l := newSuccessor(t, Config{Log: log, Guard: guard.attach}, host)
	importsWithTheGateHeld(t, host, l)
	conns := inheritAndListen(t, l, udpAddr)
	tcp, err := l.ListenTCP("tcp", "4", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, tcp)
	var taken []uint64
	for _, c := range conns {
		taken = append(taken, inode(t, c))
	}
	if taken = append(taken, inode(t, tcp)); !slices.Equal(taken, sockets[:3]) {
		t.Fatalf("listening on sockets %v, want the predecessor's %v", taken, sockets[:3])
	}
	if !l.gate.held.Load() {
		t.Error("gate open before TakeOver")
	}
	l.TakeOver()
	if l.gate.held.Load() {
		t.Error("gate held after TakeOver")
	}
	if len(host.imported) != 1 {
		t.Fatalf("imported %d allocations, want 1", len(host.imported))
	}
	got, want := host.imported[0], alloc
	want.ServerAddr = conns[1].LocalAddr()
	if describe(got) != describe(want) {
		t.Errorf("imported\n%s\nwant\n%s", describe(got), describe(want))
	}
	if inode(t, got.Conn) != sockets[3] {
		t.Error("allocation imported on another socket than its relay socket")
	}
	if !maps.Equal(host.importedUsers, users) {
		t.Errorf("users %v, want %v", host.importedUsers, users)
	}
	if got, want := guard.attached(), []uint64{sockets[0], sockets[1], sockets[3]}; !slices.Equal(got, want) {
		t.Errorf("source guard attached to %v, want the UDP sockets %v", got, want)
	}
	if !log.has("info", "took over 1 of 1 allocations (handed over)") {
		t.Errorf("no take-over reported:\n%s", log)
	}
	if msg, _ := receive(t, got.Conn); msg != "to the relay" {
		t.Errorf("relay socket read %q, want what waited in it", msg)
	}
	_ = tcp.SetDeadline(time.Now().Add(10 * time.Second))
	if c, err := tcp.Accept(); err != nil {
		t.Errorf("the connection waiting in the backlog: %v", err)
	} else {
		c.Close()
	}

	received := slices.Clone(l.inherited.files)
	l.Serving()
	if got, want := readNotify(t, notify), fmt.Sprintf("MAINPID=%d", os.Getpid()); got != want {
		t.Errorf("systemd told %q, want %q", got, want)
	}
	if got := p.last(t); got != "serving" {
		t.Errorf("predecessor told %q, want serving", got)
	}
	for _, f := range received {
		if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
			t.Errorf("descriptor %s the predecessor sent left open", f.Name())
		}
	}
	l.Serving() // a second time: nothing left to do
}

// notifySocket stands in for systemd's (NOTIFY_SOCKET).
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, c)
	t.Setenv("NOTIFY_SOCKET", path)
	return c
}

func readNotify(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("no systemd notification: %v", err)
	}
	return string(buf[:n])
}

// A predecessor's state this server cannot read is refused, saying why.
func TestInheritRefusesABadHandOver(t *testing.T) {
	for _, tc := range []struct{ name, state, want string }{
		{"not json", `{"version":1,`, "hand-over: state: unexpected end of JSON input"},
		{"another version", `{"version":2,"allocations":[]}`, "hand-over: state version 2, this server reads 1"},
		{"no version", `{"allocations":[]}`, "hand-over: state version 0, this server reads 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			startPredecessor(t, []byte(tc.state), nil)
			l := newSuccessor(t, Config{Log: &testLog{}}, newFakeHost(t))
			if err := l.Inherit(); err == nil || err.Error() != tc.want {
				t.Errorf("Inherit: %v, want %s", err, tc.want)
			}
		})
	}
}

// A socket sent for a listener but bound elsewhere is refused, naming
// both addresses: descriptors matched by index must not serve another's.
func TestListenRefusesASocketBoundElsewhere(t *testing.T) {
	t.Run("udp", func(t *testing.T) {
		udpAddr, other := unusedUDPAddr(t), testenv.LoopbackUDP(t)
		l := inheritListener(t, savedListener{Scheme: "udp", Addr: udpAddr}, dupFile(t, other))
		conns, err := l.ListenUDP("4", udpAddr, 1)
		closeAtEnd(t, conns...)
		want := fmt.Sprintf("hand-over: udp://%v: socket sent for %v is bound at %v", udpAddr, udpAddr, other.LocalAddr())
		if err == nil || err.Error() != want {
			t.Errorf("ListenUDP: %v, want %s", err, want)
		}
	})
	t.Run("tcp", func(t *testing.T) {
		tcpAddr := unusedTCPAddr(t)
		other, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, other)
		l := inheritListener(t, savedListener{Scheme: "tcp", Addr: tcpAddr}, dupFile(t, other))
		ln, err := l.ListenTCP("tcp", "4", tcpAddr)
		if ln != nil {
			closeAtEnd(t, ln)
		}
		want := fmt.Sprintf("hand-over: tcp://%v: socket sent for %v is bound at %v", tcpAddr, tcpAddr, other.Addr())
		if err == nil || err.Error() != want {
			t.Errorf("ListenTCP: %v, want %s", err, want)
		}
	})
	t.Run("tcp, not a TCP listener", func(t *testing.T) {
		tcpAddr, path := unusedTCPAddr(t), filepath.Join(t.TempDir(), "sock")
		other, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		closeAtEnd(t, other)
		l := inheritListener(t, savedListener{Scheme: "tcp", Addr: tcpAddr}, dupFile(t, other))
		ln, err := l.ListenTCP("tcp", "4", tcpAddr)
		if ln != nil {
			closeAtEnd(t, ln)
		}
		want := fmt.Sprintf("hand-over: tcp://%v: socket sent for %v is not a TCP listener (%s)", tcpAddr, tcpAddr, path)
		if err == nil || err.Error() != want {
			t.Errorf("ListenTCP: %v, want %s", err, want)
		}
	})
}

// inheritListener is a successor sent f as the listener s.
func inheritListener(t *testing.T, s savedListener, f *os.File) *Lifecycle {
	t.Helper()
	s.File = 0
	startPredecessor(t, marshal(t, savedState{Version: stateVersion, Listeners: []savedListener{s}}), []*os.File{f})
	l := newSuccessor(t, Config{Log: &testLog{}}, newFakeHost(t))
	if err := l.Inherit(); err != nil {
		t.Fatal(err)
	}
	return l
}

// An allocation the successor cannot restore (no such listener in the
// state, a listener no longer configured, a relay socket bound elsewhere
// than the state says, one pion refuses) is left out with a warning naming
// it and why; the others are taken over.
func TestTakeOverLeavesOutWhatItCannotRestore(t *testing.T) {
	udpAddr, goneAddr, claimed := unusedUDPAddr(t), unusedUDPAddr(t), unusedUDPAddr(t)
	good, stray := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	allocation := func(client string, listener, file int, relay netip.AddrPort, user string) savedAllocation {
		return savedAllocation{Listener: listener, Client: netip.MustParseAddrPort(client), Relay: relay, Advertised: relay, File: file, User: user, Family: 1}
	}
	somewhere := netip.MustParseAddrPort("127.0.0.1:7")
	st := savedState{
		Version:   stateVersion,
		Listeners: []savedListener{{Scheme: "udp", Addr: udpAddr, File: -1}, {Scheme: "udp", Addr: goneAddr, File: -1}},
		Allocations: []savedAllocation{
			allocation("127.0.0.1:1001", 0, 1, claimed, "stray"),
			allocation("127.0.0.1:1002", 7, -1, somewhere, "unlisted"),
			allocation("127.0.0.1:1003", 1, -1, somewhere, "gone"),
			allocation("127.0.0.1:1004", 0, -1, somewhere, "refused"),
			allocation("127.0.0.1:1005", 0, 0, addrOf(good), "good"),
		},
	}
	p := startPredecessor(t, marshal(t, st), []*os.File{dupFile(t, good), dupFile(t, stray)})
	host, log := newFakeHost(t), &testLog{}
	host.importErr = func(a Allocation) error {
		if a.Username == "refused" {
			return errors.New("relay address taken twice")
		}
		return nil
	}
	l := newSuccessor(t, Config{Log: log}, host)
	inheritAndListen(t, l, udpAddr)
	l.TakeOver()
	var asked []string
	for _, a := range host.asked {
		asked = append(asked, a.Username)
	}
	if want := []string{"refused", "good"}; !slices.Equal(asked, want) {
		t.Errorf("pion asked to import %v, want %v", asked, want)
	}
	if len(host.imported) != 1 || inode(t, host.imported[0].Conn) != inode(t, good) {
		t.Errorf("imported %d allocations, want the good one on its socket", len(host.imported))
	}
	for _, want := range []string{
		fmt.Sprintf("allocation of 127.0.0.1:1001 (relay %v) not taken over: socket sent for %v is bound at %v", claimed, claimed, stray.LocalAddr()),
		fmt.Sprintf("allocation of 127.0.0.1:1002 (relay %v) not taken over: no listener 7", somewhere),
		fmt.Sprintf("allocation of 127.0.0.1:1003 (relay %v) not taken over: listener %v is no longer configured", somewhere, goneAddr),
		fmt.Sprintf("allocation of 127.0.0.1:1004 (relay %v) not taken over: relay address taken twice", somewhere),
	} {
		if !log.has("warn", want) {
			t.Errorf("no warning %q:\n%s", want, log)
		}
	}
	if !log.has("info", "took over 1 of 5 allocations (handed over)") {
		t.Errorf("no take-over reported:\n%s", log)
	}
	l.Serving()
	if got := p.last(t); got != "serving" {
		t.Errorf("predecessor told %q, want serving", got)
	}
}

// A stop with keep-offload saves the allocations without sockets (the
// next start binds them again) in a file only root reads; the next start
// holds its readers until pion has them, and uses the file once.
func TestKeptStateRestoresAllocations(t *testing.T) {
	udpAddr, path := unusedUDPAddr(t), filepath.Join(t.TempDir(), "state", "state.json")
	client, relay := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	alloc := allocationOn(relay, client.LocalAddr(), 0)
	oldHost := newFakeHost(t)
	oldHost.exported, oldHost.users, oldHost.relays = []Allocation{alloc}, users, []net.PacketConn{relay}
	old := New(Config{Log: &testLog{}}, oldHost)
	udp, err := old.ListenUDP("4", udpAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, udp...)
	st, files, err := old.freeze(false)
	if err != nil {
		t.Fatal(err)
	}
	if files != nil || st.Listeners[0].File != -1 || st.Allocations[0].File != -1 {
		t.Fatalf("a saved state with descriptors: %d files, listener file %d, allocation file %d", len(files), st.Listeners[0].File, st.Allocations[0].File)
	}
	if err := writeStateFile(path, st); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("state file: %v %v, want mode 0600", fi, err)
	}
	// The old process exits: its ports are free.
	udp[0].Close()
	relay.Close()

	host, log := newFakeHost(t), &testLog{}
	l := New(Config{StateFile: path, Log: log}, host)
	importsWithTheGateHeld(t, host, l)
	conns := inheritAndListen(t, l, udpAddr)
	if !l.gate.held.Load() {
		t.Error("gate open before TakeOver")
	}
	l.TakeOver()
	if l.gate.held.Load() {
		t.Error("gate held after TakeOver")
	}
	if len(host.imported) != 1 {
		t.Fatalf("imported %d allocations, want 1", len(host.imported))
	}
	got, want := host.imported[0], alloc
	want.ServerAddr = conns[0].LocalAddr()
	if describe(got) != describe(want) || got.Conn != nil {
		t.Errorf("imported\n%s (socket %v)\nwant\n%s (no socket: pion binds one again at the wire address)", describe(got), got.Conn, describe(want))
	}
	if !maps.Equal(host.importedUsers, users) {
		t.Errorf("users %v, want %v", host.importedUsers, users)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state file kept after the take-over (%v): another start would take it again", err)
	}
	if !log.has("info", "took over 1 of 1 allocations (saved in "+path+")") {
		t.Errorf("no take-over reported:\n%s", log)
	}
	l.Serving()
}

// A state file this server cannot read is not fatal: the start goes on
// without it, saying why, and leaves the file where it is.
func TestUnreadableStateFileIsLeftAlone(t *testing.T) {
	for _, tc := range []struct{ name, state, want string }{
		{"not json", `{"version":1,`, ": unexpected end of JSON input"},
		{"another version", `{"version":2,"allocations":[]}`, ": state version 2, this server reads 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if err := os.WriteFile(path, []byte(tc.state), 0o600); err != nil {
				t.Fatal(err)
			}
			host, log := newFakeHost(t), &testLog{}
			l := New(Config{StateFile: path, Log: log}, host)
			if err := l.Inherit(); err != nil {
				t.Fatalf("Inherit: %v, want the start to go on", err)
			}
			if l.inherited != nil || l.gate.held.Load() {
				t.Error("an unreadable state taken (or the gate held for it)")
			}
			if want := "saved allocations not restored: " + path + tc.want; !log.has("warn", want) {
				t.Errorf("no warning %q:\n%s", want, log)
			}
			l.TakeOver()
			if _, err := os.Stat(path); err != nil || len(host.asked) != 0 {
				t.Errorf("state file: %v; %d imports; want it left alone", err, len(host.asked))
			}
		})
	}
}

// With no predecessor and no saved state, nothing holds the readers and
// nothing is imported; Serving, Close, and Stop with keep-offload but
// no fast path of its own do nothing.
func TestStartWithNothingToTakeOver(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{KeepOffload: true, PinDir: filepath.Join(dir, "turn"), StateFile: filepath.Join(dir, "state.json"), Log: &testLog{}}
	host := newFakeHost(t)
	l := New(cfg, host)
	conns := inheritAndListen(t, l, unusedUDPAddr(t))
	client := testenv.LoopbackUDP(t)
	reads := readThrough(t, l.Gate(), conns[0])
	sendTo(t, client, conns[0].LocalAddr(), "before TakeOver")
	if got := next(t, reads); got != "before TakeOver" {
		t.Fatalf("read %q", got)
	}
	l.TakeOver()
	l.Serving()
	if err := l.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cfg.StateFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state saved without a fast path to keep (%v)", err)
	}
	if calls := host.called(); len(calls) != 0 || len(host.asked) != 0 || host.importedUsers != nil {
		t.Errorf("server asked for %v, %d imports, users %v; want nothing", calls, len(host.asked), host.importedUsers)
	}
	sendTo(t, client, conns[0].LocalAddr(), "after Stop")
	if got := next(t, reads); got != "after Stop" {
		t.Fatalf("read %q", got)
	}
}

// A successor that fails to start leaves the fast path to its predecessor
// before its server closes (whose Close would detach it), and tells the
// predecessor only once that server is closed: never both serving.
func TestStartFailedTellsThePredecessorLast(t *testing.T) {
	p := startPredecessor(t, marshal(t, savedState{Version: stateVersion}), []*os.File{dupFile(t, testenv.LoopbackUDP(t))})
	host := newFakeHost(t)
	l := newSuccessor(t, Config{Log: &testLog{}}, host)
	if err := l.Inherit(); err != nil {
		t.Fatal(err)
	}
	received := slices.Clone(l.inherited.files)
	l.StartFailed(errors.New("config: admin-listen: no luck"), func() error {
		host.record("closeServer")
		if p.heard(t) {
			t.Error("predecessor told before the server closed")
		}
		return nil
	})
	if got, want := host.called(), []string{"DetachFastPath", "closeServer"}; !slices.Equal(got, want) {
		t.Errorf("server asked for %v, want %v", got, want)
	}
	if !l.handedOver {
		t.Error("not handed (back) over: Stop would act on the predecessor's fast path")
	}
	if got := p.last(t); got != "failed:config: admin-listen: no luck" {
		t.Errorf("predecessor told %q", got)
	}
	if _, err := received[0].Stat(); !errors.Is(err, os.ErrClosed) {
		t.Error("descriptor the predecessor sent left open")
	}
}

// Without a predecessor (a fresh start, or one after a kept stop) a
// failed start's fast path is its own: its Close ends it.
func TestStartFailedWithoutAPredecessor(t *testing.T) {
	for _, saved := range []bool{false, true} {
		t.Run(fmt.Sprintf("saved state %v", saved), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "state.json")
			if saved {
				if err := writeStateFile(path, savedState{Version: stateVersion}); err != nil {
					t.Fatal(err)
				}
			}
			host := newFakeHost(t)
			l := New(Config{StateFile: path, Log: &testLog{}}, host)
			if err := l.Inherit(); err != nil {
				t.Fatal(err)
			}
			if (l.inherited != nil) != saved {
				t.Fatalf("inherited %v, want %v", l.inherited != nil, saved)
			}
			closed := false
			l.StartFailed(errors.New("no luck"), func() error { closed = true; return nil })
			if !closed || l.handedOver || len(host.called()) != 0 {
				t.Errorf("server closed %v, handed over %v, asked for %v; want closed, its own, nothing", closed, l.handedOver, host.called())
			}
		})
	}
}

// The fast path is loaded on the predecessor's pins, else on pin-dir's
// (kept, or left by an earlier run), else on maps of its own.
func TestLoadEngineTakesThePinsWhereTheyAre(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		keepOffload, leftPins, inPin bool
		want                         string // "pin-dir", "predecessor's" or ""
	}{
		{"fresh", false, false, false, ""},
		{"keep-offload", true, false, false, "pin-dir"},
		{"pins left in pin-dir", false, true, false, "pin-dir"},
		{"predecessor's pins", true, true, true, "predecessor's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			pinDir, predPins := filepath.Join(dir, "turn"), filepath.Join(dir, "handover-1")
			if err := os.Mkdir(pinDir, 0o700); err != nil {
				t.Fatal(err)
			}
			if tc.leftPins {
				if err := os.WriteFile(filepath.Join(pinDir, "map"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			st := savedState{Version: stateVersion}
			if tc.inPin {
				st.PinDir = predPins
			}
			startPredecessor(t, marshal(t, st), nil)
			errNotLoaded := errors.New("no fast path in a unit test")
			var asked []string
			cfg := Config{KeepOffload: tc.keepOffload, PinDir: pinDir, Log: &testLog{}, OffloadConfig: func(dir string) (offload.Config, error) {
				asked = append(asked, dir)
				return offload.Config{}, errNotLoaded
			}}
			l := newSuccessor(t, cfg, newFakeHost(t))
			if err := l.Inherit(); err != nil {
				t.Fatal(err)
			}
			if _, err := l.LoadEngine(); !errors.Is(err, errNotLoaded) {
				t.Fatalf("LoadEngine: %v, want the configuration's error", err)
			}
			want := map[string]string{"pin-dir": pinDir, "predecessor's": predPins}[tc.want]
			if !slices.Equal(asked, []string{want}) {
				t.Errorf("loaded on %q, want %q", asked, want)
			}
		})
	}
}

// Pins that a process which died in a hand-over left (handover-<pid>, no
// such process) are removed at the start; a live process's, the
// predecessor's and what is not a hand-over's stay.
func TestInheritRemovesDeadHandoverPins(t *testing.T) {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	pidMax, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pins := func(name string) string {
		d := filepath.Join(dir, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "map"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		return d
	}
	// No process has a pid above pid_max.
	dead := pins(fmt.Sprintf("handover-%d", pidMax+1))
	predecessors := pins(fmt.Sprintf("handover-%d", pidMax+2)) // in another pid namespace, say
	live := pins(fmt.Sprintf("handover-%d", os.Getpid()))
	other := pins("handover-next")
	startPredecessor(t, marshal(t, savedState{Version: stateVersion, PinDir: predecessors}), nil)
	log := &testLog{}
	l := newSuccessor(t, Config{PinDir: filepath.Join(dir, "turn"), Log: log}, newFakeHost(t))
	if err := l.Inherit(); err != nil {
		t.Fatal(err)
	}
	for d, want := range map[string]bool{dead: false, predecessors: true, live: true, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: kept %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
	if want := fmt.Sprintf("removed the fast path pid %d pinned for a hand-over it did not finish", pidMax+1); !log.has("warn", want) {
		t.Errorf("no warning %q:\n%s", want, log)
	}
}

// A successor that took no fast path over removes the pins in pin-dir and
// the predecessor's, so the old program does not relay on unowned; the
// predecessor is still let go.
func TestServingRemovesPinsNoFastPathTook(t *testing.T) {
	dir := t.TempDir()
	pinDir, predPins, other := filepath.Join(dir, "turn"), filepath.Join(dir, fmt.Sprintf("handover-%d", os.Getpid())), filepath.Join(dir, "other")
	for _, d := range []string{pinDir, predPins, other} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "map"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := startPredecessor(t, marshal(t, savedState{Version: stateVersion, PinDir: predPins}), nil)
	log := &testLog{}
	l := newSuccessor(t, Config{Offload: true, PinDir: pinDir, Log: log}, newFakeHost(t))
	if err := l.Inherit(); err != nil {
		t.Fatal(err)
	}
	l.TakeOver()
	l.Serving()
	for d, want := range map[string]bool{pinDir: false, predPins: false, other: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: kept %v, want %v", filepath.Base(d), err == nil, want)
		}
	}
	if !log.has("warn", "fast path not taken over: its pins in "+predPins+" are removed") {
		t.Errorf("no warning for the predecessor's pins:\n%s", log)
	}
	if got := p.last(t); got != "serving" {
		t.Errorf("predecessor told %q, want serving", got)
	}
}

// AF_XDP sockets belong to their process: Upgrade refuses before it
// starts anything or holds a reader.
func TestUpgradeRefusesAFXDP(t *testing.T) {
	host := newFakeHost(t)
	l := New(Config{Log: &testLog{}}, host)
	l.AddAFXDP(netip.MustParseAddrPort("127.0.0.1:3478"))
	err := l.Upgrade(filepath.Join(t.TempDir(), "no-such-binary"), nil, os.Stderr, os.Stderr)
	if err == nil || !strings.Contains(err.Error(), "not with rx afxdp") {
		t.Errorf("Upgrade: %v, want a refusal naming rx afxdp", err)
	}
	if calls := host.called(); len(calls) != 0 || l.gate.held.Load() {
		t.Errorf("server asked for %v, gate held %v; want nothing done", calls, l.gate.held.Load())
	}
}

var handedOverRE = regexp.MustCompile(`handed over to pid (\d+)`)

// A successor (this test binary) that fails once it has everything leaves
// this process serving as before: readers go on with what arrived
// meanwhile, the fast path's events and the endpoints are back, the
// source guard attached again; the dtls listeners stay closed, as the log
// says. A later upgrade hands over: the successor reads what arrived
// meanwhile, and this process reads nothing more.
func TestFailedUpgradeServesOnAndALaterOneHandsOver(t *testing.T) {
	udpAddr := unusedUDPAddr(t)
	client := testenv.LoopbackUDP(t)
	host, guard, log := newFakeHost(t), &guardLog{}, &testLog{}
	l := New(Config{Log: log, Guard: guard.attach}, host)
	conns, err := l.ListenUDP("4", udpAddr, 1)
	if err != nil {
		t.Fatal(err)
	}
	dtls := &dtlsListener{}
	l.AddDTLS(dtls)
	reads := readThrough(t, l.Gate(), conns[0])
	listener := conns[0].LocalAddr()
	var during string
	host.onStopEndpoints = func() { sendTo(t, client, listener, during) } // the gate is held by then
	t.Setenv(successorUDP, udpAddr.String())

	t.Setenv(successorEnv, "fail")
	during = "during the failed upgrade"
	err = l.Upgrade(os.Args[0], []string{"-test.run=^$"}, os.Stderr, os.Stderr)
	if err == nil || !strings.Contains(err.Error(), "no luck") || !strings.HasSuffix(err.Error(), "; serving on") {
		t.Fatalf("Upgrade: %v, want the successor's failure, serving on", err)
	}
	if got := next(t, reads); got != during {
		t.Fatalf("read %q, want %q", got, during)
	}
	if got, want := host.called(), []string{"StopEndpoints", "DetachFastPath", "AttachFastPath", "StartEndpoints"}; !slices.Equal(got, want) {
		t.Errorf("server asked for %v, want %v", got, want)
	}
	if got, want := guard.attached(), []uint64{inode(t, conns[0]), inode(t, conns[0])}; !slices.Equal(got, want) {
		t.Errorf("source guard attached to %v, want %v (bound, then taken back)", got, want)
	}
	if l.handedOver || !log.has("warn", "hand-over failed: dtls listeners stay closed until a restart") {
		t.Errorf("handed over %v; log:\n%s", l.handedOver, log)
	}

	t.Setenv(successorEnv, "serve")
	during = "during the upgrade"
	if err := l.Upgrade(os.Args[0], []string{"-test.run=^$"}, os.Stderr, os.Stderr); err != nil {
		t.Fatal(err)
	}
	m := handedOverRE.FindStringSubmatch(log.String())
	if m == nil {
		t.Fatalf("no hand-over reported:\n%s", log)
	}
	pid, _ := strconv.Atoi(m[1])
	t.Cleanup(func() { waitGone(t, pid) })
	if answer, from := receive(t, client); answer != "successor: "+during || from.String() != listener.String() {
		t.Errorf("answer %q from %v, want the successor's from %v", answer, from, listener)
	}
	sendTo(t, client, listener, "after the upgrade")
	nothingFrom(t, reads)
	if !l.handedOver || dtls.closes.Load() != 1 {
		t.Errorf("handed over %v, dtls listener closed %d times; want handed over, closed once", l.handedOver, dtls.closes.Load())
	}
}

// waitGone waits for a successor that served to exit; one still running
// after 10 s is killed.
func waitGone(t *testing.T, pid int) {
	for range 500 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	t.Errorf("successor %d still running 10 s after it served: killed", pid)
}
