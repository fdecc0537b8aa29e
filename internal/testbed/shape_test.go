package testbed

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// shapeBed is a testbed (set up as a container host has it, as the SFU
// tests run it) with a UDP socket at each end of the client's veth.
func shapeBed(t *testing.T, cmd string) (tb *Testbed, server, client *net.UDPConn, dst netip.AddrPort) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommand(t, cmd)
	tb, err := NewWith(Options{Unprepared: true})
	if err != nil {
		testenv.Missing(t, "testbed: %v", err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	if server, err = ListenUDP(tb.Server, netip.AddrPortFrom(ServerClientIP4, 0)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	dst = netip.AddrPortFrom(ClientIP4, 41000)
	if client, err = ListenUDP(tb.Client, dst); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return tb, server, client, dst
}

// shapeClientLink shapes the server's end of the client's veth to kbit
// (undone at the test's end if the test does not).
func shapeClientLink(t *testing.T, tb *Testbed, kbit int) (undo func() error) {
	t.Helper()
	undo, err := Shape(tb.Server, ServerCliIface, kbit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = undo() })
	return undo
}

// Shaped at 1 Mbit/s, the server's end of the client's veth delivers no more
// than the token bucket allows of datagrams sent at three times that: at
// most the bucket plus the rate over the time from the first send to the
// last arrival (the kernel's receive timestamps, so a slow reader does not
// count), and well under all of them. Undone, everything arrives.
func TestShape(t *testing.T) {
	tb, server, client, dst := shapeBed(t, "tc")
	const kbit, size, n = 1000, 1000, 300
	undo := shapeClientLink(t, tb, kbit)
	out, err := tb.Server.Output("tc", "qdisc", "show", "dev", ServerCliIface)
	if err != nil || !strings.Contains(out, "tbf") {
		t.Fatalf("qdisc after Shape: %q, %v", out, err)
	}
	if err := timestamps(client); err != nil {
		t.Fatal(err)
	}

	// Three times the rate: 375 datagrams of 1,000 bytes a second.
	const pps = 3 * kbit * 1000 / 8 / size
	start := time.Now()
	buf := make([]byte, size)
	for i := range n {
		if _, err := server.WriteToUDPAddrPort(buf, dst); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(start.Add(time.Duration(i+1) * time.Second / pps)))
	}
	sendTime := time.Since(start)
	got, last, err := receiveUntilIdle(client, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// On the wire each datagram is the payload plus Ethernet, IPv4 and UDP headers.
	const frame = size + 14 + 20 + 8
	span := last.Sub(start)
	allowed := float64(shapeBurst(kbit)) + kbit*1000/8*span.Seconds()*1.05 + frame
	t.Logf("sent %d datagrams in %v (%.0f kbit/s), %d arrived, the last %v after the first send: %d bytes on the wire, at most %.0f allowed",
		n, sendTime, float64(n*size*8)/sendTime.Seconds()/1000, got, span, got*frame, allowed)
	if got == 0 {
		t.Fatal("nothing arrived through the shaped link")
	}
	if float64(got*frame) > allowed {
		t.Errorf("%d bytes arrived within %v, more than a %d kbit/s bucket lets through (%.0f)", got*frame, span, kbit, allowed)
	}
	// Only if the sender kept at least twice the rate (a stalled machine
	// sends slower): then at most 1/2 plus the queue and the bucket arrive.
	if rate := float64(n*frame*8) / sendTime.Seconds() / 1000; rate >= 2*kbit && got >= n*8/10 {
		t.Errorf("%d of %d datagrams sent at %.0f kbit/s arrived through a %d kbit/s shaper, want < 80%%", got, n, rate, kbit)
	}

	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if out, err := tb.Server.Output("tc", "qdisc", "show", "dev", ServerCliIface); err != nil || strings.Contains(out, "tbf") {
		t.Fatalf("qdisc after undo: %q, %v", out, err)
	}
	res, err := ExchangeAt(server, net.UDPAddrFromAddrPort(dst), client, n, size, pps)
	t.Logf("unshaped: %v", res)
	if err != nil || res.Received < n*95/100 {
		t.Errorf("unshaped: %v, %v, want >= 95%% received", res, err)
	}
}

// With 20% random loss in the client namespace, 2,000 datagrams lose 20%
// within six standard deviations of a binomial, the rule's counter has the
// ones missing, and undone, everything arrives.
func TestDropRandom(t *testing.T) {
	tb, server, client, dst := shapeBed(t, "nft")
	const percent, n, size = 20, 2000, 100
	undo, err := DropRandom(tb.Client, percent)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = undo() })
	// A second call replaces the table rather than adding a rule.
	if undo, err = DropRandom(tb.Client, percent); err != nil {
		t.Fatal(err)
	}
	res, err := ExchangeAt(server, net.UDPAddrFromAddrPort(dst), client, n, size, 5000)
	if err != nil {
		t.Fatal(err)
	}
	rules, err := tb.Client.Output("nft", "list", "table", "inet", DropTable)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`counter packets (\d+)`).FindAllStringSubmatch(rules, -1)
	if len(m) != 1 {
		t.Fatalf("want one counting rule:\n%s", rules)
	}
	dropped, _ := strconv.Atoi(m[0][1])
	loss := float64(res.Lost()) / n
	p := percent / 100.0
	sd := math.Sqrt(p * (1 - p) / n)
	t.Logf("%v: loss %.1f%% (want %d%% ± %.1f%%), the rule dropped %d", res, 100*loss, percent, 600*sd, dropped)
	if math.Abs(loss-p) > 6*sd || res.Corrupt+res.Duplicate > 0 {
		t.Errorf("%v: loss %.3f, want %.2f ± %.3f", res, loss, p, 6*sd)
	}
	// Datagrams the rule did not drop all arrive (a few may be lost otherwise).
	if dropped > res.Lost() || res.Lost()-dropped > n/100 {
		t.Errorf("the rule dropped %d datagrams, %d were lost", dropped, res.Lost())
	}

	if err := undo(); err != nil {
		t.Fatal(err)
	}
	if out, err := tb.Client.Output("nft", "list", "tables"); err != nil || strings.Contains(out, DropTable) {
		t.Fatalf("tables after undo: %q, %v", out, err)
	}
	res, err = ExchangeAt(server, net.UDPAddrFromAddrPort(dst), client, 500, size, 5000)
	t.Logf("undone: %v", res)
	if err != nil || res.Received < 500*95/100 {
		t.Errorf("undone: %v, %v, want >= 95%% received", res, err)
	}
}

// timestamps makes the kernel stamp each datagram c receives (SO_TIMESTAMPNS).
func timestamps(c *net.UDPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	})
	return errors.Join(err, serr)
}

// receiveUntilIdle reads datagrams until none has come for idle (bounded:
// the sender has stopped) and returns how many came and the kernel's
// receive time of the last.
func receiveUntilIdle(c *net.UDPConn, idle time.Duration) (int, time.Time, error) {
	defer c.SetReadDeadline(time.Time{})
	buf, oob := make([]byte, 65536), make([]byte, 128)
	var got int
	var last time.Time
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		_ = c.SetReadDeadline(time.Now().Add(idle))
		_, oobn, _, _, err := c.ReadMsgUDPAddrPort(buf, oob)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return got, last, nil
			}
			return got, last, err
		}
		got++
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return got, last, err
		}
		for _, m := range msgs {
			if m.Header.Level == unix.SOL_SOCKET && m.Header.Type == unix.SCM_TIMESTAMPNS && len(m.Data) >= 16 {
				// struct timespec on a 64-bit kernel: seconds, nanoseconds.
				last = time.Unix(int64(binary.NativeEndian.Uint64(m.Data)), int64(binary.NativeEndian.Uint64(m.Data[8:])))
			}
		}
	}
	return got, last, errors.New("still receiving after a minute")
}

// Lifting a shaper delivers what waits in its queue, as a link that clears
// does: of datagrams sent far over the rate, all arrive but those tbf
// dropped before the lift (deleting the qdisc outright drops its backlog).
func TestUnshapeDeliversTheQueue(t *testing.T) {
	tb, server, client, dst := shapeBed(t, "tc")
	const kbit, size, n = 100, 1000, 20
	undo := shapeClientLink(t, tb, kbit)
	buf := make([]byte, size)
	for range n {
		if _, err := server.WriteToUDPAddrPort(buf, dst); err != nil {
			t.Fatal(err)
		}
	}
	out, err := tb.Server.Output("tc", "-s", "qdisc", "show", "dev", ServerCliIface)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`dropped (\d+),[^\n]*\n\s*backlog \d+b (\d+)p`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no drops and backlog in %q", out)
	}
	dropped, _ := strconv.Atoi(m[1])
	queued, _ := strconv.Atoi(m[2])
	if queued == 0 {
		t.Fatalf("nothing queued to deliver: %q", out)
	}
	if err := undo(); err != nil {
		t.Fatal(err)
	}
	got, _, err := receiveUntilIdle(client, 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got != n-dropped {
		t.Errorf("%d of %d datagrams arrived, %d dropped by tbf and %d queued at the lift: want %d", got, n, dropped, queued, n-dropped)
	}
}
