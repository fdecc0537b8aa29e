package dataplane

import (
	"testing"
	"time"

	"golang.org/x/net/ipv4"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// Datagrams read together long after they came carry the times the
// kernel took them (SO_TIMESTAMPNS, on the arrival logs' clock), not the
// read's: two sent 50 ms apart and read 100 ms later are 50 ms apart and
// 100 ms old.
func TestRxTimesAreTheKernels(t *testing.T) {
	c, sender := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	testenv.Must(t, enableRxTimes(c))
	// (The kernel turns receive stamping on for the first socket that asks
	// from a work queue, net_enable_timestamp: a datagram that comes before
	// that is stamped when it is read. The SFU's first packets come after
	// its ICE and DTLS exchanges.)
	time.Sleep(100 * time.Millisecond)
	send := func() {
		if _, err := sender.WriteTo([]byte("x"), c.LocalAddr()); err != nil {
			t.Fatal(err)
		}
	}
	before := monoNow()
	send()
	time.Sleep(50 * time.Millisecond)
	send()
	time.Sleep(100 * time.Millisecond)
	msgs := []ipv4.Message{{Buffers: [][]byte{make([]byte, 64)}, OOB: make([]byte, rxTimeOOB)}, {Buffers: [][]byte{make([]byte, 64)}, OOB: make([]byte, rxTimeOOB)}}
	n, err := ipv4.NewPacketConn(c).ReadBatch(msgs, 0)
	if err != nil || n != 2 {
		t.Fatalf("read %d datagrams: %v", n, err)
	}
	offset, now := clockOffset()
	first, second := rxTime(msgs[0].OOB[:msgs[0].NN], offset, now), rxTime(msgs[1].OOB[:msgs[1].NN], offset, now)
	if first < before || second-first < 45*time.Millisecond || now-second < 90*time.Millisecond {
		t.Errorf("received at %v and %v after the first send, read %v after (want 50 ms apart, the second 100 ms before the read)",
			first-before, second-before, now-before)
	}
	if got := rxTime(nil, offset, now); got != 0 {
		t.Errorf("no control message: %v", got)
	}
}
