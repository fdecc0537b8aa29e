package afxdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
)

// readBatches reads n datagrams with ReadBatch, batch messages at a time,
// checks each payload as sendFrom made it and their order per path (the
// kernel socket's, Arrival 0, keep none with AF_XDP's), and returns how
// many calls it took.
func readBatches(t *testing.T, c *Conn, n, size, batch int) (calls int) {
	t.Helper()
	ms := make([]Message, batch)
	for i := range ms {
		ms[i].Buf = make([]byte, 2048)
	}
	want := make([]byte, size)
	last := map[bool]int{true: -1, false: -1} // by "via the kernel socket"
	seen := map[int]bool{}
	for got := 0; got < n; {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		k, err := c.ReadBatch(ms)
		if err != nil {
			t.Fatalf("after %d of %d datagrams: %v", got, n, err)
		}
		if k < 1 || k > batch {
			t.Fatalf("ReadBatch filled %d of %d messages", k, batch)
		}
		calls++
		for _, m := range ms[:k] {
			seq := int(binary.BigEndian.Uint32(m.Buf))
			binary.BigEndian.PutUint32(want, uint32(seq))
			for j := 4; j < size; j++ {
				want[j] = byte(seq + j)
			}
			kernel := m.Arrival == 0
			if seq >= n || seen[seq] || seq <= last[kernel] || !bytes.Equal(m.Buf[:m.N], want) || !m.Addr.IsValid() {
				t.Fatalf("datagram %d (%d bytes from %v, via the kernel socket %v): repeated, after %d on its path, or not as sent",
					seq, m.N, m.Addr, kernel, last[kernel])
			}
			seen[seq], last[kernel] = true, seq
		}
		got += k
	}
	return calls
}

// ReadBatch takes what the ring holds in one call: a burst of datagrams
// comes in far fewer calls than datagrams, each one as sent, in order,
// all through AF_XDP; one byte of buffer cuts a datagram as ReadFrom does.
func TestReadBatch(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	c := listenIn(t, tb.Server, ListenConfig{Control: testbed.LargeBuffers}, "udp4", testbed.ServerClientIP4.String()+":0")
	const n, size, batch = 2000, 1200, 64
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), c.LocalAddr().(*net.UDPAddr).AddrPort(), n, size)
	time.Sleep(100 * time.Millisecond) // a burst waiting in the ring
	calls := readBatches(t, c, n, size, batch)
	st := requireViaXDP(t, c, n)
	if calls > 2*n/batch {
		t.Errorf("%d calls for %d datagrams waiting, at most %d a call: want at most %d", calls, n, batch, 2*n/batch)
	}
	t.Logf("%d datagrams in %d calls; stats %+v", n, calls, st)

	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), c.LocalAddr().(*net.UDPAddr).AddrPort(), 1, size)
	ms := []Message{{Buf: make([]byte, 10)}}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if k, err := c.ReadBatch(ms); err != nil || k != 1 || ms[0].N != 10 || ms[0].Arrival == 0 {
		t.Errorf("into 10 bytes: %d messages, %+v, %v; want one cut to 10 bytes, via AF_XDP", k, ms[0], err)
	}
	if k, err := c.ReadBatch(nil); k != 0 || err != nil {
		t.Errorf("no messages: %d, %v", k, err)
	}
}

// A reader too slow for the ring: what took the kernel socket comes in
// the same batches, every datagram once, in order on each path, and the
// fill ring gets every frame back (AF_XDP takes the next ones).
func TestReadBatchWithFallbacks(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	const frames, n, size = 64, 500, 300
	c := listenIn(t, tb.Server, ListenConfig{Frames: frames, Control: testbed.LargeBuffers}, "udp4", testbed.ServerClientIP4.String()+":0")
	to := c.LocalAddr().(*net.UDPAddr).AddrPort()
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), to, n, size)
	time.Sleep(100 * time.Millisecond)
	readBatches(t, c, n, size, 16)
	st, _ := c.Stats()
	if st.ViaXDP < frames || st.ViaKernel == 0 || st.ViaXDP+st.ViaKernel != n {
		t.Errorf("via AF_XDP %d, via the kernel socket %d; want at least %d and the rest of %d", st.ViaXDP, st.ViaKernel, frames, n)
	}
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), to, frames, size)
	readBatches(t, c, frames, size, 16)
	if after, _ := c.Stats(); after.ViaXDP-st.ViaXDP+after.Outcomes["fallback_partial_checksum"].Packets-st.Outcomes["fallback_partial_checksum"].Packets != frames {
		t.Errorf("after draining, %d of %d via AF_XDP", after.ViaXDP-st.ViaXDP, frames)
	}
}

// Two conns on one queue, each read by two goroutines with ReadBatch
// while datagrams for both arrive; one conn closes, then the other: every
// reader ends with net.ErrClosed, none hangs or touches a ring after its
// socket closed, and the conn left open meanwhile gets what was sent to it.
func TestReadBatchConcurrentClose(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	addr := testbed.ServerClientIP4.String() + ":0"
	a := listenIn(t, tb.Server, ListenConfig{Control: testbed.LargeBuffers}, "udp4", addr)
	b := listenIn(t, tb.Server, ListenConfig{Control: testbed.LargeBuffers}, "udp4", addr)
	const size = 200
	type result struct {
		got int
		err error
	}
	read := func(c *Conn, out chan<- result) {
		ms := make([]Message, 16)
		for i := range ms {
			ms[i].Buf = make([]byte, 2048)
		}
		got := 0
		for {
			k, err := c.ReadBatch(ms)
			if err != nil {
				out <- result{got, err}
				return
			}
			got += k
		}
	}
	results := make(chan result, 4)
	for _, c := range []*Conn{a, b, a, b} {
		go read(c, results)
	}
	s := senderIn(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	stop := make(chan struct{})
	sent := make(chan int, 1)
	go func() { // both conns' datagrams, for at most 2 s
		n := 0
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); n++ {
			select {
			case <-stop:
				sent <- n
				return
			default:
			}
			for _, c := range []*Conn{a, b} {
				if err := sendFrom(s, c.LocalAddr().(*net.UDPAddr).AddrPort(), 1, size); err != nil {
					t.Error(err)
				}
			}
		}
		sent <- n
	}()
	time.Sleep(200 * time.Millisecond)
	a.Close()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	<-sent
	time.Sleep(100 * time.Millisecond)
	st, _ := b.Stats()
	b.Close()
	total := 0
	for range 4 {
		select {
		case r := <-results:
			if !errors.Is(r.err, net.ErrClosed) {
				t.Errorf("a reader ended with %v, want net.ErrClosed", r.err)
			}
			total += r.got
		case <-time.After(5 * time.Second):
			t.Fatal("a reader still inside ReadBatch 5 s after Close")
		}
	}
	if st.ViaXDP == 0 || total == 0 {
		t.Errorf("read %d datagrams, %d of b's via AF_XDP before its Close: want some", total, st.ViaXDP)
	}
}
