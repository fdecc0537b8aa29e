package afxdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/egress"
	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// TestWriteFrame checks the frames WriteBatch builds against package
// frame's (an independent build: headers, lengths, both checksums), for
// both families and every payload length from 0 to 1472 bytes.
func TestWriteFrame(t *testing.T) {
	path := egress.Path{SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, MTU: 1500}
	for _, c := range []struct{ src, dst string }{
		{"10.0.0.1:5000", "192.0.2.7:40000"},
		{"[fd00::1]:5000", "[2001:db8::7]:40000"},
	} {
		src, dst := netip.MustParseAddrPort(c.src), netip.MustParseAddrPort(c.dst)
		f := make([]byte, frameSize)
		for n := range 1473 {
			payload := make([]byte, n)
			for i := range payload {
				payload[i] = byte(i*13 + n)
			}
			h := header{ttl: 63, tos: 0xb8, id: uint16(n * 7919), flowLabel: 0xabcde}
			want := frame.UDP{SrcMAC: path.SrcMAC[:], DstMAC: path.DstMAC[:], Src: src, Dst: dst, TOS: h.tos, TTL: h.ttl,
				DF: true, ID: h.id, Payload: payload}
			if src.Addr().Is6() {
				want.DF, want.ID, want.FlowLabel = false, 0, h.flowLabel
			}
			l := writeFrame(f, &path, src, dst, payload, h)
			if got := f[:l]; !bytes.Equal(got, want.Marshal()) {
				t.Fatalf("%s -> %s, %d bytes:\n got %x\nwant %x", src, dst, n, got, want.Marshal())
			}
		}
	}
}

// txBed is the testbed with a conn in the server namespace on addr and a
// receiving socket in the client namespace on to.
type txBed struct {
	tb   *testbed.Testbed
	conn *Conn
	rx   *net.UDPConn
	to   netip.AddrPort
}

func newTxBed(t *testing.T, network, addr string, to netip.Addr) *txBed {
	return newTxBedWith(t, testbed.Options{}, network, addr, to)
}

// newTxBedWith is newTxBed on a testbed made as opts says.
func newTxBedWith(t *testing.T, opts testbed.Options, network, addr string, to netip.Addr) *txBed {
	tb := newBed(t, opts)
	b := &txBed{tb: tb, conn: listenIn(t, tb.Server, ListenConfig{}, network, addr)}
	var err error
	if b.rx, err = testbed.ListenUDP(tb.Client, netip.AddrPortFrom(to, 0)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.rx.Close() })
	b.to = b.rx.LocalAddr().(*net.UDPAddr).AddrPort()
	return b
}

// send writes n numbered datagrams from first on (sizes from 4 to 1400
// bytes) with WriteBatch, batch at a time, and checks that WriteBatch
// took them all.
func (b *txBed) send(t *testing.T, first, n, batch int) {
	t.Helper()
	ms := make([]Message, batch)
	for sent := 0; sent < n; {
		k := min(batch, n-sent)
		for i := range k {
			ms[i] = Message{Buf: numbered(first + sent + i), Addr: b.to}
		}
		got, err := b.conn.WriteBatch(ms[:k])
		if err != nil || got != k {
			t.Fatalf("WriteBatch of %d after %d: %d sent, %v", k, sent, got, err)
		}
		for i := range k {
			if ms[i].N != len(ms[i].Buf) {
				t.Fatalf("message %d: N %d of %d bytes", sent+i, ms[i].N, len(ms[i].Buf))
			}
		}
		sent += k
		time.Sleep(200 * time.Microsecond) // (the receiving socket keeps up)
	}
}

// numbered is datagram i: its number, then bytes derived from it, 4 to
// 1400 bytes long.
func numbered(i int) []byte {
	b := make([]byte, 4+(i*97)%1397)
	binary.BigEndian.PutUint32(b, uint32(i))
	for j := 4; j < len(b); j++ {
		b[j] = byte(i + j)
	}
	return b
}

// receive reads n datagrams from first on, each as sent, in order, from
// the conn's address (from, if the conn's is a wildcard).
func (b *txBed) receive(t *testing.T, first, n int, from netip.Addr) {
	t.Helper()
	buf := make([]byte, 2048)
	for i := first; i < first+n; i++ {
		b.rx.SetReadDeadline(time.Now().Add(3 * time.Second))
		k, src, err := b.rx.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d (%d from %d on): %v", i, i-first, first, err)
		}
		if !bytes.Equal(buf[:k], numbered(i)) {
			t.Fatalf("datagram %d: got %d bytes numbered %d, want %d bytes as sent", i, k, binary.BigEndian.Uint32(buf), len(numbered(i)))
		}
		if src.Addr().Unmap() != from || src.Port() != b.conn.localAddrPort().Port() {
			t.Fatalf("datagram %d from %v, want %v port %d", i, src, from, b.conn.localAddrPort().Port())
		}
	}
}

// WriteBatch sends through AF_XDP where the kernel would send the same
// frame: after the first datagram (the neighbour resolved by the kernel
// as it sends it, looked up again soon after), every datagram of a 3,000-datagram run goes through
// AF_XDP, arrives whole (the receiving kernel checks both checksums), in
// order, from the conn's address; IPv4 and IPv6, a bound address and a
// wildcard, and on a container host's veths.
func TestWriteBatch(t *testing.T) {
	for _, c := range []struct {
		name, network, addr string
		from, to            netip.Addr
		opts                testbed.Options
	}{
		{"IPv4", "udp4", testbed.ServerClientIP4.String() + ":0", testbed.ServerClientIP4, testbed.ClientIP4, testbed.Options{}},
		{"IPv6", "udp6", "[" + testbed.ServerClientIP6.String() + "]:0", testbed.ServerClientIP6, testbed.ClientIP6, testbed.Options{}},
		{"wildcard", "udp", "[::]:0", testbed.ServerClientIP4, testbed.ClientIP4, testbed.Options{}},
		// A container host: the far end runs no XDP and keeps TX checksum
		// offload on (the frames arrive by its stack alone).
		{"container host", "udp4", testbed.ServerClientIP4.String() + ":0", testbed.ServerClientIP4, testbed.ClientIP4, testbed.Options{Unprepared: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newTxBedWith(t, c.opts, c.network, c.addr, c.to)
			b.send(t, 0, 1, 1)
			b.receive(t, 0, 1, c.from)
			// No neighbour entry before the kernel's send: looked up again
			// within a few milliseconds, not a path's lifetime.
			if st, _ := b.conn.Stats(); st.Sent.ViaKernel["neighbour"] != 1 {
				t.Errorf("first datagram: %+v, want it through the kernel for its neighbour", st.Sent)
			}
			time.Sleep(50 * time.Millisecond)
			before, _ := b.conn.Stats()
			const n = 3000
			done := make(chan struct{})
			go func() {
				defer close(done)
				b.receive(t, 1, n, c.from)
			}()
			b.send(t, 1, n, 64)
			<-done
			st, _ := b.conn.Stats()
			if via := st.Sent.ViaXDP - before.Sent.ViaXDP; via != n {
				t.Errorf("%d of %d through AF_XDP; through the kernel: %v (before %v), %q", via, n, st.Sent.ViaKernel, before.Sent.ViaKernel, st.Sent.Refusal)
			}
			t.Logf("sent %+v", st.Sent)
		})
	}
}

// WriteBatch is never weaker than the kernel's sending it goes around:
// with a shaping qdisc on the interface, an nftables output chain or an
// IPsec policy in the namespace, every datagram goes through the kernel
// socket (counted, the cause named), and the chain's drop and the
// policy's block hold; a prohibited route is the kernel's error; with
// nothing on the way, AF_XDP.
func TestWriteBatchKeepsTheKernelsEgress(t *testing.T) {
	b := newTxBed(t, "udp4", testbed.ServerClientIP4.String()+":0", testbed.ClientIP4)
	from := testbed.ServerClientIP4
	b.send(t, 0, 1, 1)
	b.receive(t, 0, 1, from)
	next := 1
	run := func(t *testing.T, arrives bool) (viaXDP uint64, kernel map[string]uint64, refusal string) {
		t.Helper()
		time.Sleep(pathTTL + 100*time.Millisecond)
		before, _ := b.conn.Stats()
		const n = 100
		first := next
		ms := make([]Message, n)
		for i := range ms {
			ms[i] = Message{Buf: numbered(first + i), Addr: b.to}
		}
		k, err := b.conn.WriteBatch(ms)
		next += n
		if arrives {
			if k != n || err != nil {
				t.Fatalf("WriteBatch: %d of %d, %v", k, n, err)
			}
			b.receive(t, first, n, from)
		} else {
			// The kernel's answer to an output chain's drop or a
			// blocking policy: EPERM.
			if k != 0 || !errors.Is(err, syscall.EPERM) {
				t.Errorf("WriteBatch where the kernel refuses: %d of %d, %v; want none, EPERM", k, n, err)
			}
			b.rx.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			if k, _, err := b.rx.ReadFromUDPAddrPort(make([]byte, 2048)); err == nil {
				st, _ := b.conn.Stats()
				t.Fatalf("a datagram of %d bytes arrived through a chain that drops them (sent %+v)", k, st.Sent)
			}
		}
		st, _ := b.conn.Stats()
		kernel = map[string]uint64{}
		for why, k := range st.Sent.ViaKernel {
			if d := k - before.Sent.ViaKernel[why]; d > 0 {
				kernel[why] = d
			}
		}
		return st.Sent.ViaXDP - before.Sent.ViaXDP, kernel, st.Sent.Refusal
	}
	ns := b.tb.Server
	if out, err := ns.Output("tc", "qdisc", "add", "dev", testbed.ServerCliIface, "root", "tbf", "rate", "100mbit", "burst", "64kb", "latency", "100ms"); err != nil {
		t.Fatalf("tc: %v %s", err, out)
	}
	if via, kernel, why := run(t, true); via != 0 || kernel["egress"] != 100 || !strings.Contains(why, "qdisc tbf") {
		t.Errorf("under tbf: %d through AF_XDP, through the kernel %v (%q); want all through the kernel for the qdisc", via, kernel, why)
	}
	if out, err := ns.Output("tc", "qdisc", "del", "dev", testbed.ServerCliIface, "root"); err != nil {
		t.Fatalf("tc: %v %s", err, out)
	}
	for _, cmd := range []string{"add table inet ebrtc_tx",
		"add chain inet ebrtc_tx out { type filter hook output priority 0; policy accept; }",
		"add rule inet ebrtc_tx out udp dport " + strconv.Itoa(int(b.to.Port())) + " drop"} {
		if out, err := ns.Output("nft", cmd); err != nil {
			t.Fatalf("nft: %v %s", err, out)
		}
	}
	t.Cleanup(func() { ns.Output("nft", "delete", "table", "inet", "ebrtc_tx") })
	if via, _, why := run(t, false); via != 0 || !strings.Contains(why, "nftables chain ebrtc_tx out hooked on output") {
		t.Errorf("under an nftables output chain: %d through AF_XDP (%q); want all through the kernel, dropped there", via, why)
	}
	if out, err := ns.Output("nft", "delete", "table", "inet", "ebrtc_tx"); err != nil {
		t.Fatalf("nft: %v %s", err, out)
	}
	if via, kernel, _ := run(t, true); via != 100 {
		t.Errorf("with nothing on the way: %d through AF_XDP, through the kernel %v; want all 100 through AF_XDP", via, kernel)
	}
	// A TC egress program attached with tcx (no clsact qdisc to see): every
	// datagram through the kernel, where the program runs.
	detach := attachTCXEgress(t, ns, testbed.ServerCliIface)
	if via, kernel, why := run(t, true); via != 0 || kernel["egress"] != 100 || !strings.Contains(why, "tcx") {
		t.Errorf("under a tcx egress program: %d through AF_XDP, through the kernel %v (%q); want all through the kernel", via, kernel, why)
	}
	detach()
	// An IPsec policy blocking the flow: the kernel's EPERM, not a frame around it.
	policy := []string{"xfrm", "policy", "add", "src", from.String() + "/32", "dst", testbed.ClientIP4.String() + "/32", "dir", "out", "action", "block"}
	if out, err := ns.Output("ip", policy...); err != nil {
		t.Fatalf("ip xfrm: %v %s", err, out)
	}
	t.Cleanup(func() { ns.Output("ip", "xfrm", "policy", "flush") })
	if via, _, why := run(t, false); via != 0 || !strings.Contains(why, "xfrm") {
		t.Errorf("under an xfrm policy: %d through AF_XDP (%q); want all through the kernel, refused there", via, why)
	}
	if out, err := ns.Output("ip", "xfrm", "policy", "flush"); err != nil {
		t.Fatalf("ip xfrm: %v %s", err, out)
	}

	if out, err := ns.Output("ip", "route", "add", "prohibit", "10.201.1.77/32"); err != nil {
		t.Fatalf("ip route: %v %s", err, out)
	}
	before, _ := b.conn.Stats()
	k, err := b.conn.WriteBatch([]Message{{Buf: []byte("x"), Addr: netip.MustParseAddrPort("10.201.1.77:9")}})
	if st, _ := b.conn.Stats(); k != 0 || err == nil || st.Sent.ViaXDP != before.Sent.ViaXDP {
		t.Errorf("to a prohibited route: %d sent, %v, %d through AF_XDP; want the kernel's error", k, err, st.Sent.ViaXDP-before.Sent.ViaXDP)
	} else {
		t.Logf("to a prohibited route: %v", err)
	}
}

// WriteBatch follows the socket as the kernel would: a v6-only socket
// sends no IPv4 and port 0 is refused (the kernel's errors, nothing
// through AF_XDP); a socket with a mark goes through the kernel, whose
// routing rule for the mark holds; the frames through AF_XDP carry what
// the kernel's carry (captured at the peer: TTL, TOS, DF, lengths; all but
// the ID and checksum of IPv4, the flow label of IPv6).
func TestWriteBatchFollowsTheSocket(t *testing.T) {
	b := newTxBed(t, "udp6", "[::]:0", testbed.ClientIP4)
	v4 := netip.AddrPortFrom(testbed.ClientIP4, b.to.Port())
	if k, err := b.conn.WriteBatch([]Message{{Buf: []byte("x"), Addr: v4}}); k != 0 || err == nil {
		t.Errorf("IPv4 from a v6-only socket: %d sent, %v; want the kernel's error", k, err)
	}
	if k, err := b.conn.WriteBatch([]Message{{Buf: []byte("x"), Addr: netip.AddrPortFrom(testbed.ClientIP6, 0)}}); k != 0 || err == nil {
		t.Errorf("to port 0: %d sent, %v; want the kernel's error", k, err)
	}
	if st, _ := b.conn.Stats(); st.Sent.ViaXDP != 0 {
		t.Errorf("%d through AF_XDP", st.Sent.ViaXDP)
	}

	b6 := newTxBed(t, "udp6", "["+testbed.ServerClientIP6.String()+"]:0", testbed.ClientIP6)
	compareHeaders(t, b6, testbed.ServerClientIP6)
	b = newTxBed(t, "udp4", testbed.ServerClientIP4.String()+":0", testbed.ClientIP4)
	compareHeaders(t, b, testbed.ServerClientIP4)
	raw, _ := b.conn.SyscallConn()
	raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_MARK, 7) })
	time.Sleep(pathTTL + 100*time.Millisecond)
	b.send(t, 100, 10, 10)
	b.receive(t, 100, 10, testbed.ServerClientIP4)
	if st, _ := b.conn.Stats(); st.Sent.ViaKernel["socket_options"] != 10 || !strings.Contains(st.Sent.Refusal, "SO_MARK") {
		t.Errorf("with SO_MARK: %+v; want all through the kernel for the mark", st.Sent)
	}
	if out, err := b.tb.Server.Output("ip", "rule", "add", "fwmark", "7", "prohibit"); err != nil {
		t.Fatalf("ip rule: %v %s", err, out)
	}
	if k, err := b.conn.WriteBatch([]Message{{Buf: []byte("x"), Addr: b.to}}); k != 0 || !errors.Is(err, syscall.EACCES) {
		t.Errorf("marked, under a rule prohibiting the mark: %d sent, %v; want EACCES", k, err)
	}
}

// compareHeaders sends a datagram through the kernel socket and one
// through AF_XDP from the conn's address from and compares their
// Ethernet and IP headers as captured at the peer: all but the lengths,
// the IPv4 ID and checksum (the kernel's ID is a hashed counter) and the
// IPv6 flow label (the kernel's hash has a secret key).
func compareHeaders(t *testing.T, b *txBed, from netip.Addr) {
	t.Helper()
	capture := captureIn(t, b.tb.Client, testbed.ClientIface, b.to.Port())
	b.send(t, 0, 1, 1) // the neighbour resolved
	b.receive(t, 0, 1, from)
	time.Sleep(pathTTL + 100*time.Millisecond)
	if _, err := b.conn.KernelConn().WriteToUDPAddrPort(numbered(1), b.to); err != nil {
		t.Fatal(err)
	}
	b.send(t, 2, 1, 1)
	b.receive(t, 1, 2, from)
	if st, _ := b.conn.Stats(); st.Sent.ViaXDP != 1 {
		t.Fatalf("sent %+v; want the second through AF_XDP", st.Sent)
	}
	frames := capture(3)
	kernel, xdp := frames[1], frames[2]
	n := 34
	if from.Is6() {
		n = 54
	}
	k, x := slices.Clone(kernel[:n]), slices.Clone(xdp[:n])
	for _, h := range [][]byte{k[14:], x[14:]} {
		if from.Is4() {
			clear(h[2:6])   // total length, ID
			clear(h[10:12]) // checksum
		} else {
			h[1] &= 0xf0  // flow label
			clear(h[2:6]) // flow label, payload length
		}
	}
	if !bytes.Equal(k, x) {
		t.Errorf("headers differ:\nkernel %x\nAF_XDP %x", kernel[:n], xdp[:n])
	}
}

// captureIn captures UDP frames to port on iface in ns (AF_PACKET);
// capture(n) returns the first n, waiting up to 3 s.
func captureIn(t *testing.T, ns *netns.NS, iface string, port uint16) func(n int) [][]byte {
	t.Helper()
	var fd int
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		if fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 3})
	return func(n int) [][]byte {
		var out [][]byte
		buf := make([]byte, 2048)
		for len(out) < n {
			k, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				t.Fatalf("captured %d of %d frames: %v", len(out), n, err)
			}
			f := buf[:k]
			v4 := k >= 42 && binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 17 && binary.BigEndian.Uint16(f[36:]) == port
			v6 := k >= 62 && binary.BigEndian.Uint16(f[12:]) == 0x86dd && f[20] == 17 && binary.BigEndian.Uint16(f[56:]) == port
			if v4 || v6 {
				out = append(out, slices.Clone(f))
			}
		}
		return out
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// A socket that got no send frames (over the locked-memory limit) still
// sends: WriteBatch goes through the kernel socket, counted, the cause
// named.
func TestWriteBatchWithoutSendFrames(t *testing.T) {
	b := newTxBed(t, "udp4", testbed.ServerClientIP4.String()+":0", testbed.ClientIP4)
	b.conn.ifaces[0].queues[0].noTX = "xsk: register a UMEM of 10240 KiB: over the locked-memory limit"
	b.send(t, 0, 1, 1) // the neighbour resolved
	b.receive(t, 0, 1, testbed.ServerClientIP4)
	time.Sleep(pathTTL + 100*time.Millisecond)
	b.send(t, 1, 100, 10)
	b.receive(t, 1, 100, testbed.ServerClientIP4)
	st, _ := b.conn.Stats()
	if st.Sent.ViaXDP != 0 || st.Sent.ViaKernel["no_tx_ring"] != 100 || !strings.Contains(st.Sent.Refusal, "locked-memory limit") {
		t.Errorf("sent %+v; want all through the kernel for want of a TX ring", st.Sent)
	}
}

// attachTCXEgress attaches a TC program that passes everything to iface's
// egress in ns with tcx; the returned func detaches it (so does the
// test's end).
func attachTCXEgress(t *testing.T, ns *netns.NS, iface string) func() {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}) // TC_ACT_OK
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { prog.Close() })
	var l link.Link
	err = ns.Do(func() error {
		ifi, err := net.InterfaceByName(iface)
		if err != nil {
			return err
		}
		l, err = link.AttachTCX(link.TCXOptions{Interface: ifi.Index, Program: prog, Attach: ebpf.AttachTCXEgress})
		return err
	})
	if err != nil {
		t.Fatalf("tcx: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return func() { l.Close() }
}
