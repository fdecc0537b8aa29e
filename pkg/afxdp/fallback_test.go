package afxdp

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// TestFallbacks sends what AF_XDP cannot take whole: every datagram still
// arrives, through the kernel socket, and the classifier counts why.
func TestFallbacks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    testbed.Options
		mtu     int
		size    int
		options []byte // IPv4 options on the sender's socket
		outcome string
	}{
		// A container host's veth: TX checksum offload on, no XDP at the far end.
		{name: "partial checksum", opts: testbed.Options{Unprepared: true}, size: 500, outcome: "fallback_partial_checksum"},
		{name: "IP options", size: 500, options: []byte{1, 1, 1, 0}, outcome: "pass_ip_options"},
		{name: "fragments", size: 3000, outcome: "pass_fragment"},
		{name: "oversized frame", mtu: 3000, size: 2500, outcome: "fallback_oversize"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newBed(t, tc.opts)
			if tc.mtu != 0 {
				setMTU(t, tb, tc.mtu)
			}
			c := listenIn(t, tb.Server, ListenConfig{Control: testbed.LargeBuffers}, "udp4", testbed.ServerClientIP4.String()+":0")
			const n = 50
			s, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			if tc.options != nil {
				rc, _ := s.SyscallConn()
				var serr error
				rc.Control(func(fd uintptr) {
					serr = unix.SetsockoptString(int(fd), unix.IPPROTO_IP, unix.IP_OPTIONS, string(tc.options))
				})
				if serr != nil {
					t.Fatal(serr)
				}
			}
			to := c.LocalAddr().(*net.UDPAddr).AddrPort()
			buf := make([]byte, tc.size)
			for i := range n {
				binary.BigEndian.PutUint32(buf, uint32(i))
				if _, err := s.WriteToUDPAddrPort(buf, to); err != nil {
					t.Fatal(err)
				}
			}
			got := make([]byte, 4096)
			for i := range n {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				m, _, err := c.ReadFromUDPAddrPort(got)
				if err != nil {
					t.Fatalf("datagram %d of %d: %v", i, n, err)
				}
				if m != tc.size || binary.BigEndian.Uint32(got) != uint32(i) {
					t.Fatalf("datagram %d: %d bytes, number %d", i, m, binary.BigEndian.Uint32(got))
				}
			}
			st, err := c.Stats()
			if err != nil {
				t.Fatal(err)
			}
			all, err := namespaceOutcomes(tb.Server)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("conn %+v; namespace %v", st, all)
			if st.ViaKernel != n || st.ViaXDP != 0 {
				t.Errorf("%d via the kernel socket, %d via AF_XDP; want all %d via the kernel", st.ViaKernel, st.ViaXDP, n)
			}
			if all[tc.outcome].Packets < n {
				t.Errorf("outcome %s counted %d times, want at least %d", tc.outcome, all[tc.outcome].Packets, n)
			}
		})
	}
}

func namespaceOutcomes(ns *netns.NS) (m map[string]Counter, err error) {
	err = ns.Do(func() error { m, err = NamespaceOutcomes(); return err })
	return m, err
}

func setMTU(t *testing.T, tb *testbed.Testbed, mtu int) {
	t.Helper()
	for _, step := range []error{
		tb.Server.IP("link", "set", testbed.ServerCliIface, "mtu", strconv.Itoa(mtu)),
		tb.Client.IP("link", "set", testbed.ClientIface, "mtu", strconv.Itoa(mtu)),
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
}

// TestSlowReader lets datagrams pile up unread on a small UMEM: once the
// reader holds every frame, the classifier passes the rest to the kernel
// socket (fallback_ring_full) instead of having the kernel drop them.
// Every datagram is then read, intact, each path in order (the kernel
// socket's buffer, large here, bounds what waits there, as for any socket).
func TestSlowReader(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	const frames, n, size = 64, 500, 300
	c := listenIn(t, tb.Server, ListenConfig{Frames: frames, Control: testbed.LargeBuffers}, "udp4", testbed.ServerClientIP4.String()+":0")
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), c.LocalAddr().(*net.UDPAddr).AddrPort(), n, size)
	time.Sleep(100 * time.Millisecond) // let them all land before reading any
	buf := make([]byte, 2048)
	seen := map[uint32]bool{}
	lastXDP, lastKernel := -1, -1
	for i := range n {
		before, _ := c.Stats()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, _, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, n, err)
		}
		seq := binary.BigEndian.Uint32(buf)
		for j := 4; j < m; j++ {
			if buf[j] != byte(int(seq)+j) {
				t.Fatalf("datagram %d corrupt at byte %d", seq, j)
			}
		}
		after, _ := c.Stats()
		last := &lastKernel
		if after.ViaXDP > before.ViaXDP {
			last = &lastXDP
		}
		if int(seq) <= *last || seen[seq] || m != size {
			t.Fatalf("datagram %d (%d bytes) after %d on its path, or twice", seq, m, *last)
		}
		*last, seen[seq] = int(seq), true
	}
	st, _ := c.Stats()
	t.Logf("stats: %+v", st)
	// Each datagram through the kernel is a counted fallback: ring_full,
	// but a full checksum equal to the pseudo-header sum by chance (1 in
	// 65,536, as CI once met) takes the kernel path as a partial one.
	var fallbacks uint64
	for name, o := range st.Outcomes {
		if strings.HasPrefix(name, "fallback_") {
			fallbacks += o.Packets
		}
	}
	if st.ViaXDP < frames || st.Outcomes["fallback_ring_full"].Packets == 0 || fallbacks != st.ViaKernel {
		t.Errorf("via AF_XDP %d (want at least the %d frames), via kernel %d (want the rest, each a counted fallback: %d, ring full %d)",
			st.ViaXDP, frames, st.ViaKernel, fallbacks, st.Outcomes["fallback_ring_full"].Packets)
	}
	if st.Sockets.RxDropped != 0 || st.Sockets.FillRingEmpty != 0 {
		t.Errorf("the kernel dropped %d frames (fill ring empty %d times); want none", st.Sockets.RxDropped, st.Sockets.FillRingEmpty)
	}
	// The ring drained: AF_XDP takes the next datagrams again.
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), c.LocalAddr().(*net.UDPAddr).AddrPort(), 10, size)
	receiveN(t, c, 10, size)
	after, _ := c.Stats()
	partial := after.Outcomes["fallback_partial_checksum"].Packets - st.Outcomes["fallback_partial_checksum"].Packets
	if after.ViaXDP+partial != st.ViaXDP+10 { // as requireViaXDP
		t.Errorf("after draining, %d of 10 via AF_XDP (%d partial checksums)", after.ViaXDP-st.ViaXDP, partial)
	}
}

// TestBadChecksum sends hand-made datagrams: one with a wrong UDP checksum
// (dropped and counted, as the kernel drops it), one without a checksum
// (IPv4 allows it) and a good one, which arrive.
func TestBadChecksum(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	c := listenIn(t, tb.Server, ListenConfig{}, "udp4", testbed.ServerClientIP4.String()+":0")
	to := c.LocalAddr().(*net.UDPAddr).AddrPort()
	from := netip.AddrPortFrom(testbed.ClientIP4, 40000)
	good := udp4Datagram(from, to, []byte("good one"), true)
	bad := udp4Datagram(from, to, []byte("bad one!"), true)
	bad[len(bad)-1] ^= 0xff // payload changed after the checksum
	none := udp4Datagram(from, to, []byte("no checksum"), false)
	if err := tb.Client.Do(func() error { return sendRawIPv4(to.Addr(), bad, none, good) }); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	for _, want := range []string{"no checksum", "good one"} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, src, err := c.ReadFromUDPAddrPort(buf)
		if err != nil || string(buf[:n]) != want || src != from {
			t.Fatalf("got %q from %v (%v), want %q from %v", buf[:n], src, err, want, from)
		}
	}
	st, _ := c.Stats()
	if st.BadChecksum != 1 || st.ViaXDP != 2 {
		t.Errorf("bad checksums %d (want 1), via AF_XDP %d (want 2)", st.BadChecksum, st.ViaXDP)
	}
}

// udp4Datagram is an IPv4 packet with a UDP datagram, its checksums (if
// any) computed by package frame, independently of this one.
func udp4Datagram(from, to netip.AddrPort, payload []byte, checksum bool) []byte {
	return frame.UDP{Src: from, Dst: to, TTL: 64, Payload: payload, NoChecksum: !checksum}.Marshal()[14:]
}

// sendRawIPv4 sends whole IPv4 packets (IP_HDRINCL) to dst.
func sendRawIPv4(dst netip.Addr, packets ...[]byte) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, p := range packets {
		if err := unix.Sendto(fd, p, 0, &unix.SockaddrInet4{Addr: dst.As4()}); err != nil {
			return err
		}
	}
	return nil
}

// TestChecksumOK checks the user-space checksum check against package
// frame's checksums, on every length from 0 to 64 bytes of payload.
func TestChecksumOK(t *testing.T) {
	from, to := netip.MustParseAddrPort("10.0.0.1:1234"), netip.MustParseAddrPort("10.0.0.2:5678")
	for n := range 65 {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i*7 + n)
		}
		d := udp4Datagram(from, to, payload, true)
		s, dd := from.Addr().As4(), to.Addr().As4()
		// The classifier's pseudo-header sum: memory-order words, folded.
		pseudo := append(append(append([]byte{}, s[:]...), dd[:]...), 0, unix.IPPROTO_UDP, byte((8+n)>>8), byte(8+n))
		var sum uint64
		for i := 0; i < len(pseudo); i += 2 {
			sum += uint64(binary.NativeEndian.Uint16(pseudo[i:]))
		}
		for sum>>16 != 0 {
			sum = sum&0xffff + sum>>16
		}
		if !checksumOK(uint16(sum), d[20:]) {
			t.Fatalf("%d bytes: a sound datagram fails", n)
		}
		if n > 0 {
			d[len(d)-1] ^= 0x10
			if checksumOK(uint16(sum), d[20:]) {
				t.Fatalf("%d bytes: a corrupted datagram passes", n)
			}
		}
	}
}

// TestOccupiedHook: an interface that runs another XDP program is an error
// naming the cause, and nothing is left behind.
func TestOccupiedHook(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	if err := tb.Server.IP("link", "set", "dev", testbed.ServerCliIface, "xdp", "obj", xdpPassObject(t), "sec", "xdp"); err != nil {
		t.Fatal(err)
	}
	err := tb.Server.Do(func() error {
		c, err := Listen("udp4", testbed.ServerClientIP4.String()+":0")
		if err == nil {
			c.Close()
		}
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "already runs an XDP program") {
		t.Fatalf("err = %v, want the interface's XDP hook named as taken", err)
	}
	var left map[string]Counter
	if left, err = namespaceOutcomes(tb.Server); err != nil || left != nil {
		t.Fatalf("classifier still loaded after the failed listen (%v, %v)", left, err)
	}
}

// xdpPassObject writes an ELF with a pass-all XDP program for ip(8).
func xdpPassObject(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("../../internal/offload/xdppass_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	p := t.TempDir() + "/pass.o"
	if err := os.WriteFile(p, src, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSourceChecks spoofs sources the kernel judges for itself: one routed
// back through another interface (reverse path) and a martian (loopback).
// The classifier hands both to the kernel, which applies the host's policy:
// here (rp_filter off, as in a new namespace) it delivers the first and
// drops the martian.
func TestSourceChecks(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	c := listenIn(t, tb.Server, ListenConfig{}, "udp4", testbed.ServerClientIP4.String()+":0")
	to := c.LocalAddr().(*net.UDPAddr).AddrPort()
	other := udp4Datagram(netip.AddrPortFrom(testbed.PeerIP4, 40000), to, []byte("from the peer side"), true)
	martian := udp4Datagram(netip.MustParseAddrPort("127.0.0.1:40000"), to, []byte("martian"), true)
	if err := tb.Client.Do(func() error { return sendRawIPv4(to.Addr(), martian, other) }); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, src, err := c.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "from the peer side" {
		t.Fatalf("got %q from %v (%v)", buf[:n], src, err)
	}
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, src, err := c.ReadFromUDPAddrPort(buf); err == nil {
		t.Fatalf("the martian arrived: %q from %v", buf[:n], src)
	}
	st, _ := c.Stats()
	t.Logf("stats %+v", st)
	if st.ViaXDP != 0 || st.ViaKernel != 1 || st.Outcomes["fallback_reverse_path"].Packets != 1 || st.Outcomes["fallback_martian_source"].Packets != 1 {
		t.Errorf("want one reverse-path and one martian fallback, one datagram via the kernel, none via AF_XDP")
	}
}

// TestEthernetPadding: a short IPv4 datagram in a frame padded to
// Ethernet's 60 bytes (as NICs pad) arrives through AF_XDP without the
// padding.
func TestEthernetPadding(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	c := listenIn(t, tb.Server, ListenConfig{}, "udp4", testbed.ServerClientIP4.String()+":0")
	var dst, src net.HardwareAddr
	tb.Server.Do(func() error {
		ifi, err := net.InterfaceByName(testbed.ServerCliIface)
		dst = ifi.HardwareAddr
		return err
	})
	tb.Client.Do(func() error { ifi, err := net.InterfaceByName(testbed.ClientIface); src = ifi.HardwareAddr; return err })
	from := netip.AddrPortFrom(testbed.ClientIP4, 40000)
	f := frame.UDP{SrcMAC: src, DstMAC: dst, Src: from, Dst: c.LocalAddr().(*net.UDPAddr).AddrPort(), TTL: 64, Payload: []byte("tiny")}.Marshal()
	f = append(f, make([]byte, 60-len(f))...)
	if err := tb.Client.Do(func() error { return sendRawFrame(testbed.ClientIface, f) }); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, got, err := c.ReadFromUDPAddrPort(buf)
	if err != nil || string(buf[:n]) != "tiny" || got != from {
		t.Fatalf("got %q from %v (%v), want \"tiny\" from %v", buf[:n], got, err, from)
	}
	if st, _ := c.Stats(); st.ViaXDP != 1 {
		t.Errorf("stats %+v, want it through AF_XDP", st)
	}
}

// sendRawFrame sends a whole Ethernet frame out of iface (AF_PACKET).
func sendRawFrame(iface string, f []byte) error {
	ifi, err := net.InterfaceByName(iface)
	if err != nil {
		return err
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Sendto(fd, f, 0, &unix.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6})
}

// TestInterfaces: a wildcard conn receives on every interface (a
// goroutine drains each one's socket, as no reader can wait on two); a
// conn bound to one interface's address gets a datagram for it that comes
// in on another through the kernel socket, counted, since its frames come
// only from the interfaces it holds.
func TestInterfaces(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	any := listenIn(t, tb.Server, ListenConfig{}, "udp4", "0.0.0.0:0")
	port := any.LocalAddr().(*net.UDPAddr).AddrPort().Port()
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), netip.AddrPortFrom(testbed.ServerClientIP4, port), 50, 100)
	receiveN(t, any, 50, 100)
	sendN(t, tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0), netip.AddrPortFrom(testbed.ServerPeerIP4, port), 50, 100)
	receiveN(t, any, 50, 100)
	if st := requireViaXDP(t, any, 100); len(st.XDPMode) != 2 {
		t.Errorf("wildcard conn: %+v, want XDP on both interfaces", st)
	}

	one := listenIn(t, tb.Server, ListenConfig{}, "udp4", testbed.ServerClientIP4.String()+":0")
	// From the peer namespace to the client-side address: in on eth-peer.
	sendN(t, tb.Peer, netip.AddrPortFrom(testbed.PeerIP4, 0), one.LocalAddr().(*net.UDPAddr).AddrPort(), 10, 100)
	receiveN(t, one, 10, 100)
	if st, _ := one.Stats(); st.ViaKernel != 10 || st.Outcomes["fallback_other_interface"].Packets != 10 {
		t.Errorf("conn on eth-cli, datagrams in on eth-peer: %+v", st)
	}
}
