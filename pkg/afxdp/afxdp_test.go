package afxdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// newBed is the testbed (client ns <-> server ns), removed when the test ends.
func newBed(t *testing.T, opts testbed.Options) *testbed.Testbed {
	t.Helper()
	testenv.RequireRoot(t)
	tb, err := testbed.NewWith(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// listenIn opens a conn inside ns, closed when the test ends.
func listenIn(t *testing.T, ns *netns.NS, lc ListenConfig, network, addr string) *Conn {
	t.Helper()
	var c *Conn
	err := ns.Do(func() (err error) {
		c, err = lc.ListenPacket(t.Context(), network, addr)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// sendN sends n numbered datagrams of size bytes from a socket in ns.
func sendN(t *testing.T, ns *netns.NS, from, to netip.AddrPort, n, size int) *net.UDPConn {
	t.Helper()
	s := senderIn(t, ns, from)
	if err := sendFrom(s, to, n, size); err != nil {
		t.Fatal(err)
	}
	return s
}

// senderIn is a UDP socket in ns, closed when the test ends.
func senderIn(t *testing.T, ns *netns.NS, from netip.AddrPort) *net.UDPConn {
	t.Helper()
	s, err := testbed.ListenUDP(ns, from)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// sendFrom sends n datagrams: a 4-byte number, then bytes derived from it.
func sendFrom(s *net.UDPConn, to netip.AddrPort, n, size int) error {
	buf := make([]byte, size)
	for i := range n {
		binary.BigEndian.PutUint32(buf, uint32(i))
		for j := 4; j < size; j++ {
			buf[j] = byte(i + j)
		}
		if _, err := s.WriteToUDPAddrPort(buf, to); err != nil {
			return err
		}
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // paced: a burst is not what this checks
		}
	}
	return nil
}

// receiveN reads n datagrams, checks each payload and its order, and
// returns the senders seen.
func receiveN(t *testing.T, c *Conn, n, size int) map[netip.AddrPort]int {
	t.Helper()
	before, _ := c.Stats()
	seen := map[netip.AddrPort]int{}
	buf := make([]byte, 2048)
	want := make([]byte, size)
	order := make([]int, 0, n)
	for i := range n {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, n, err)
		}
		seq := int(binary.BigEndian.Uint32(buf))
		binary.BigEndian.PutUint32(want, uint32(seq))
		for j := 4; j < size; j++ {
			want[j] = byte(seq + j)
		}
		if seq >= n || !bytes.Equal(buf[:m], want) {
			t.Fatalf("datagram %d: got %d bytes (seq %d), want %d bytes as sent", i, m, seq, size)
		}
		order = append(order, seq)
		seen[from]++
	}
	for i, seq := range slices.Sorted(slices.Values(order)) {
		if seq != i {
			t.Fatalf("datagram %d missing or repeated: %v", i, order)
		}
	}
	// In order, unless some took the kernel socket (which keeps no order
	// with the AF_XDP path).
	if after, _ := c.Stats(); after.ViaKernel == before.ViaKernel && !slices.IsSorted(order) {
		t.Fatalf("all through AF_XDP, yet out of order: %v", order)
	}
	return seen
}

// requireViaXDP: all n datagrams through AF_XDP but those the classifier
// must hand the kernel as partial checksums: a full checksum equal to the
// pseudo-header sum by chance (1 in 65,536) is taken for one (bpf/udp.h).
func requireViaXDP(t *testing.T, c *Conn, n uint64) Stats {
	t.Helper()
	st, err := c.Stats()
	if err != nil {
		t.Fatal(err)
	}
	partial := st.Outcomes["fallback_partial_checksum"].Packets
	if st.ViaXDP+st.ViaKernel != n || st.ViaKernel != partial {
		t.Errorf("%v: %d via AF_XDP, %d via the kernel socket (%d partial checksums); want all %d via AF_XDP but those",
			c.LocalAddr(), st.ViaXDP, st.ViaKernel, partial, n)
	}
	return st
}

func TestReceiveViaXDP(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	for _, tc := range []struct {
		name, network string
		listen        netip.AddrPort
		client        netip.Addr
	}{
		{"IPv4", "udp4", netip.AddrPortFrom(testbed.ServerClientIP4, 0), testbed.ClientIP4},
		{"IPv6", "udp6", netip.AddrPortFrom(testbed.ServerClientIP6, 0), testbed.ClientIP6},
		{"dual-stack wildcard, IPv4", "udp", netip.MustParseAddrPort("[::]:0"), testbed.ClientIP4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := listenIn(t, tb.Server, ListenConfig{Interfaces: []string{testbed.ServerCliIface}}, tc.network, tc.listen.String())
			to := netip.AddrPortFrom(tc.listen.Addr(), c.LocalAddr().(*net.UDPAddr).AddrPort().Port())
			if to.Addr().IsUnspecified() {
				to = netip.AddrPortFrom(testbed.ServerClientIP4, to.Port())
			}
			const n, size = 500, 1200
			s := sendN(t, tb.Client, netip.AddrPortFrom(tc.client, 0), to, n, size)
			seen := receiveN(t, c, n, size)
			st := requireViaXDP(t, c, n)
			t.Logf("stats: %+v", st)
			sender := s.LocalAddr().(*net.UDPAddr).AddrPort()
			if tc.network == "udp" {
				sender = netip.AddrPortFrom(netip.AddrFrom16(sender.Addr().As16()), sender.Port())
			}
			if seen[sender] != n {
				t.Errorf("senders %v, want %v (as the kernel socket reports it)", seen, sender)
			}
			if st.Mode != "copy" || st.XDPMode[testbed.ServerCliIface] != "native" {
				t.Errorf("mode %q, XDP %v; want copy on native XDP (veth)", st.Mode, st.XDPMode)
			}
		})
	}
}

func TestNamespaceUnloadsWithLastConn(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	lc := ListenConfig{Interfaces: []string{testbed.ServerCliIface}}
	a := listenIn(t, tb.Server, lc, "udp4", testbed.ServerClientIP4.String()+":0")
	b := listenIn(t, tb.Server, lc, "udp4", testbed.ServerClientIP4.String()+":0")
	if !xdpAttached(t, tb.Server) {
		t.Fatalf("no XDP program on %s with two conns", testbed.ServerCliIface)
	}
	a.Close()
	if !xdpAttached(t, tb.Server) {
		t.Fatalf("XDP program gone with one conn left open")
	}
	b.Close()
	if xdpAttached(t, tb.Server) {
		t.Fatalf("XDP program still attached after the last conn closed")
	}
	// At once again: the queues the closed sockets held are free.
	c := listenIn(t, tb.Server, lc, "udp4", testbed.ServerClientIP4.String()+":0")
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), c.LocalAddr().(*net.UDPAddr).AddrPort(), 20, 100)
	receiveN(t, c, 20, 100)
}

// TestSamePortBothFamilies: a conn on an IPv4 address and one on an IPv6
// address may share a port (as a TURN server's two listeners do); each
// receives its family's datagrams through AF_XDP.
func TestSamePortBothFamilies(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	c4 := listenIn(t, tb.Server, ListenConfig{}, "udp4", testbed.ServerClientIP4.String()+":0")
	port := c4.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	c6 := listenIn(t, tb.Server, ListenConfig{}, "udp6", netip.AddrPortFrom(testbed.ServerClientIP6, port).String())
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), netip.AddrPortFrom(testbed.ServerClientIP4, port), 50, 100)
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP6, 0), netip.AddrPortFrom(testbed.ServerClientIP6, port), 50, 100)
	receiveN(t, c4, 50, 100)
	receiveN(t, c6, 50, 100)
	for _, c := range []*Conn{c4, c6} {
		requireViaXDP(t, c, 50)
	}
}

// TestConcurrentConns: four conns on one interface (one RX queue: their
// readers take turns polling it and hand each other's frames on), each
// read by its own goroutine while all four receive at once; every
// datagram arrives at its conn once, and in order unless some took the
// kernel socket (a reader out of fill-ring credit under this blast: the
// two paths keep no order between them, docs/afxdp.md).
func TestConcurrentConns(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	const conns, n, size = 4, 2000, 200
	var cs []*Conn
	for range conns {
		cs = append(cs, listenIn(t, tb.Server, ListenConfig{Control: testbed.LargeBuffers}, "udp4", testbed.ServerClientIP4.String()+":0"))
	}
	dropped := vethTxDropped(t, tb)
	got := make([][]uint32, conns)
	errs := make(chan error, 2*conns)
	for k, c := range cs {
		go func() {
			buf := make([]byte, 2048)
			for {
				// Done once nothing comes for a second (the senders are done).
				c.SetReadDeadline(time.Now().Add(time.Second))
				m, _, err := c.ReadFromUDPAddrPort(buf)
				if errors.Is(err, os.ErrDeadlineExceeded) && len(got[k]) > 0 {
					errs <- nil
					return
				}
				if err != nil {
					errs <- fmt.Errorf("%v: after %d datagrams: %w", c.LocalAddr(), len(got[k]), err)
					return
				}
				if m != size {
					errs <- fmt.Errorf("%v: datagram %d has %d bytes", c.LocalAddr(), len(got[k]), m)
					return
				}
				got[k] = append(got[k], binary.BigEndian.Uint32(buf))
			}
		}()
	}
	for _, c := range cs {
		s := senderIn(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
		go func() {
			if err := sendFrom(s, c.LocalAddr().(*net.UDPAddr).AddrPort(), n, size); err != nil {
				errs <- err
			}
		}()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Four senders at once overflow the veth's ring now and then: what it
	// drops (counted on the client's end) never reaches the hook; every
	// datagram that does arrives once.
	received := 0
	for k, c := range cs {
		st, _ := c.Stats()
		received += len(got[k])
		if st.ViaXDP+st.ViaKernel != uint64(len(got[k])) {
			t.Errorf("%v: read %d, stats %+v", c.LocalAddr(), len(got[k]), st)
		}
		sorted := slices.Sorted(slices.Values(got[k]))
		if len(slices.Compact(slices.Clone(sorted))) != len(sorted) || (len(sorted) > 0 && sorted[len(sorted)-1] >= n) {
			t.Fatalf("%v: a datagram repeated or out of range", c.LocalAddr())
		}
		if st.ViaKernel == 0 && !slices.Equal(sorted, got[k]) {
			t.Errorf("%v: all through AF_XDP, yet out of order", c.LocalAddr())
		}
		t.Logf("%v: %d via AF_XDP, %d via the kernel socket", c.LocalAddr(), st.ViaXDP, st.ViaKernel)
	}
	if lost := vethTxDropped(t, tb) - dropped; uint64(received)+lost != conns*n {
		t.Errorf("received %d, the veth dropped %d: %d of %d sent unaccounted for", received, lost, conns*n-received-int(lost), conns*n)
	} else if lost > 0 {
		t.Logf("the veth dropped %d of %d (its ring full)", lost, conns*n)
	}
}

// vethTxDropped is what the client's veth dropped sending (its peer's
// ring full).
func vethTxDropped(t *testing.T, tb *testbed.Testbed) uint64 {
	t.Helper()
	out, err := tb.Client.Output("cat", "/sys/class/net/"+testbed.ClientIface+"/statistics/tx_dropped")
	if err != nil {
		t.Fatal(err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(out)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestDeadlinesAndClose: a read without traffic ends at its deadline; a
// deadline set while a read waits ends it; Close ends a waiting read.
func TestDeadlinesAndClose(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	c := listenIn(t, tb.Server, ListenConfig{}, "udp4", testbed.ServerClientIP4.String()+":0")
	buf := make([]byte, 100)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, _, err := c.ReadFrom(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	c.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() { _, _, err := c.ReadFrom(buf); done <- err }()
	time.Sleep(50 * time.Millisecond)
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read after a new deadline: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a deadline set during a read did not end it")
	}
	c.SetReadDeadline(time.Time{})
	go func() { _, _, err := c.ReadFrom(buf); done <- err }()
	time.Sleep(50 * time.Millisecond)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read during Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting read")
	}
}

// TestMultiQueue: on a veth with four RX queues the conn has a socket on
// each, drained by a goroutine per queue (a reader waits on one socket
// only); datagrams from several senders, spread over the queues, all
// arrive once. (Order holds per queue: a veth picks the queue by the
// sending CPU, so a sender that moves between CPUs changes queue, which
// reorders through the kernel stack as well; a NIC's RSS keeps a flow on
// one queue.)
func TestMultiQueue(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	const inner, outer = "eth-mq", "mq"
	for _, err := range []error{
		tb.Server.IP("link", "add", inner, "numrxqueues", "4", "numtxqueues", "4", "type", "veth", "peer", "name", outer,
			"numrxqueues", "4", "numtxqueues", "4", "netns", tb.Client.Name),
		tb.Server.IP("addr", "add", "10.201.50.1/24", "dev", inner),
		tb.Client.IP("addr", "add", "10.201.50.2/24", "dev", outer),
		tb.Server.IP("link", "set", inner, "up"),
		tb.Client.IP("link", "set", outer, "up"),
		tb.Client.Do(func() error { return netns.DisableTxChecksum(outer) }),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	c := listenIn(t, tb.Server, ListenConfig{Control: testbed.LargeBuffers}, "udp4", "10.201.50.1:0")
	if q := len(c.ifaces[0].queues); q != 4 || c.direct != nil {
		t.Fatalf("%d sockets (want 4), polled by the reader %v (want a goroutine per queue)", q, c.direct != nil)
	}
	const senders, n, size = 8, 300, 200
	to := c.LocalAddr().(*net.UDPAddr).AddrPort()
	for range senders {
		s := senderIn(t, tb.Client, netip.MustParseAddrPort("10.201.50.2:0"))
		go sendFrom(s, to, n, size)
	}
	seen := map[netip.AddrPort]map[uint32]bool{}
	buf := make([]byte, 2048)
	for i := range senders * n {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, from, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, senders*n, err)
		}
		if seen[from] == nil {
			seen[from] = map[uint32]bool{}
		}
		got := binary.BigEndian.Uint32(buf)
		if got >= n || seen[from][got] {
			t.Fatalf("from %v: number %d twice or out of range", from, got)
		}
		seen[from][got] = true
	}
	t.Logf("stats %+v", requireViaXDP(t, c, senders*n))
}
