package turnserver_test

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/turnclient"
)

var (
	churnAllocations = flag.Int("churn.allocations", 1200, "allocations TestChurn creates (make soak: 10000)")
	churnMemory      = flag.Bool("churn.memory", false, "TestChurn runs two rounds and checks the heap after a collection (up to 2.5 min each)")
	churnDuration    = flag.Duration("churn.duration", 0, "spread TestChurn's waves over at least this long (make soak: 3m)")
)

// Churn: allocations with channels come and go in waves; a third is
// released with Refresh(0), a third expires, and a third outlives its
// channel and permission (3 s) before being released. Afterwards the
// process and the kernel hold nothing for them: no allocation, no channel,
// no map entry, no extra goroutine or file descriptor. With -churn.memory
// (make soak) the heap after a collection is back near where it started,
// and a second round leaves it where the first did (no leak per allocation).
func TestChurn(t *testing.T) {
	tb := newTestbed(t)
	// A bandwidth limit too, so the fast path's buckets come and go with
	// the allocations (one per allocation and direction, shared by channels).
	r := startRelay(t, tb, "--user-quota", "0", "--allocate-rate", "0", "--max-bps", "10000000",
		"--channel-lifetime", "3s", "--permission-lifetime", "3s")
	peer := newPeer(t, tb, testbed.PeerIP4)
	go drain(peer)
	time.Sleep(time.Second) // let start-up settle before the baseline
	base := idleBaseline(t, r)
	rounds := 1
	if *churnMemory {
		rounds = 2
	}
	var heaps []float64
	for round := range rounds {
		churnRound(t, tb, r, peer, base, round)
		if *churnMemory {
			heaps = append(heaps, heapAfterGC(t, r, time.Now().Add(time.Second)))
			t.Logf("round %d: heap in use after GC %.0f bytes (%.0f before the churn)", round+1, heaps[round], base["go_memstats_heap_inuse_bytes"])
		}
	}
	if *churnMemory {
		// Go's maps keep their buckets after deletes: allow 1 KB per allocation
		// of the peak, once; a second round must not add to it.
		if growth := heaps[0] - base["go_memstats_heap_inuse_bytes"]; growth > float64(*churnAllocations)*1024 {
			t.Errorf("heap grew by %.0f bytes over %d allocations", growth, *churnAllocations)
		}
		if again := heaps[1] - heaps[0]; again > 1<<20 {
			t.Errorf("the second round grew the heap by %.0f more bytes: a leak per allocation", again)
		}
	}
}

func churnRound(t *testing.T, tb *testbed.Testbed, r *testbed.Relay, peer *net.UDPConn, base testbed.Metrics, round int) {
	total := *churnAllocations
	start := time.Now()
	const wave, workers = 300, 12
	pace := *churnDuration / time.Duration((total+wave-1)/wave)
	var mu sync.Mutex
	var keep, expiring []*churnClient // released at the end; left to expire
	maxChannels := 0.0
	for done := 0; done < total; done += wave {
		waveStart := time.Now()
		n := min(wave, total-done)
		clients := make(chan *churnClient, n)
		var wg sync.WaitGroup
		var firstErr error
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += workers {
					c, err := newChurnClient(tb, round*total+done+i, peerAddr(peer))
					if err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
					clients <- c
				}
			}()
		}
		wg.Wait()
		close(clients)
		if firstErr != nil {
			t.Fatalf("after %d allocations: %v\n%s", done, firstErr, tailOf(r.Output()))
		}
		if m := metrics(t, r); m["ebrtc_xdp_channels"] > maxChannels {
			maxChannels = m["ebrtc_xdp_channels"]
		}
		for c := range clients {
			switch c.n % 3 {
			case 0:
				if err := c.Release(); err != nil {
					t.Fatalf("release: %v", err)
				}
				c.conn.Close()
			case 1: // expires with its 4 s lifetime; its port stays taken until
				// then (a new socket on it would be the same 5-tuple: 437)
				expiring = append(expiring, c)
			case 2:
				keep = append(keep, c)
			}
		}
		time.Sleep(time.Until(waveStart.Add(pace)))
	}
	time.Sleep(5 * time.Second) // past every lifetime of the waves
	for _, c := range expiring {
		c.conn.Close()
	}
	for _, c := range keep {
		if err := c.Release(); err != nil {
			t.Fatalf("release after the channel expired: %v", err)
		}
		c.conn.Close()
	}
	churnTime := time.Since(start)
	end := waitMetric(t, r, "no allocation and no channel left", func(m testbed.Metrics) bool {
		return m["ebrtc_turn_allocations"] == 0 && m["ebrtc_turn_channels"] == 0 && m["ebrtc_xdp_channels"] == 0
	})
	entries, err := testbed.XDPMapEntries(tb.Server, testbed.ServerCliIface)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"client_routes_v", "peer_routes_v4", "peer_routes_v6"} {
		if entries[name] != 0 {
			t.Errorf("map %s holds %d entries with no allocation left", name, entries[name])
		}
	}
	t.Logf("round %d: %d allocations with a channel each in %v, up to %.0f channels in the fast path at once",
		round+1, total, churnTime.Round(time.Second), maxChannels)
	for _, m := range []string{"go_goroutines", "process_open_fds", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes"} {
		t.Logf("%-30s before %12.0f after %12.0f", m, base[m], end[m])
	}
	if maxChannels < float64(min(wave, total))/2 {
		t.Errorf("at most %.0f channels were in the fast path at once: the churn did not reach it", maxChannels)
	}
	waitMetric(t, r, "goroutines and file descriptors back to the baseline", func(m testbed.Metrics) bool {
		return m["go_goroutines"] <= base["go_goroutines"] && m["process_open_fds"] <= base["process_open_fds"]
	})
}

// idleBaseline reads the idle relay's metrics five times over a second:
// goroutines and descriptors are the highest seen (an idle server's own
// timers and scrapes come and go by one or two), so that only what the
// churn leaves behind exceeds them.
func idleBaseline(t *testing.T, r *testbed.Relay) testbed.Metrics {
	t.Helper()
	base := metrics(t, r)
	for range 4 {
		time.Sleep(200 * time.Millisecond)
		m := metrics(t, r)
		for _, k := range []string{"go_goroutines", "process_open_fds"} {
			base[k] = max(base[k], m[k])
		}
	}
	return base
}

// churnClient is one allocation with one channel to the peer.
type churnClient struct {
	*turnclient.Client
	conn *net.UDPConn
	n    int
}

func newChurnClient(tb *testbed.Testbed, n int, peer netip.AddrPort) (*churnClient, error) {
	conn, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	if err != nil {
		return nil, err
	}
	lifetime := time.Hour
	if n%3 == 1 {
		lifetime = 4 * time.Second
	}
	c, err := turnclient.AllocateWith(conn, server4, turnclient.Options{User: user, Password: pass, Lifetime: lifetime})
	if err == nil {
		err = c.ChannelBind(peer, uint16(0x4000+n%0x4000))
	}
	if err == nil {
		err = c.SendChannelData(uint16(0x4000+n%0x4000), []byte(fmt.Sprintf("churn-%06d", n)))
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("client %d: %w", n, err)
	}
	return &churnClient{Client: c, conn: conn, n: n}, nil
}

// heapAfterGC waits for the runtime's next collection after idle (Go forces
// one every 2 minutes) and returns the heap in use then.
func heapAfterGC(t *testing.T, r *testbed.Relay, idle time.Time) float64 {
	t.Helper()
	deadline := time.Now().Add(150 * time.Second)
	for {
		m := metrics(t, r)
		if m["go_memstats_last_gc_time_seconds"] > float64(idle.Unix()) {
			return m["go_memstats_heap_inuse_bytes"]
		}
		if time.Now().After(deadline) {
			t.Fatal("no garbage collection within 150 s of idle")
		}
		time.Sleep(2 * time.Second)
	}
}

func tailOf(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}
