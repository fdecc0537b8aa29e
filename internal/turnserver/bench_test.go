package turnserver

import (
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// BenchmarkUserSpaceRelay is the slow path's cost per relayed ChannelData
// datagram, for comparison with the fast path's (offload.BenchmarkFastPath):
// an in-process server on loopback, one socket, 64 datagrams in flight. It
// includes both kernel crossings and the sender's and receiver's syscalls.
func BenchmarkUserSpaceRelay(b *testing.B) {
	s, err := Load([]string{
		"--listen", "udp://127.0.0.1:34780", "--relay-ip", "127.0.0.1", "--allow-peer", "127.0.0.0/8",
		"--user", "bench:pw", "--offload", "off", "--udp-threads", "1", "--log-level", "error",
		"--min-port", "40000", "--max-port", "40999",
	}, noEnv)
	if err != nil {
		b.Fatal(err)
	}
	srv, err := Start(s)
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	client, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer client.Close()
	peer, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer peer.Close()
	_ = peer.SetReadBuffer(4 << 20)
	tc, err := turnclient.Allocate(client, netip.MustParseAddrPort("127.0.0.1:34780"), "bench", "pw", false)
	if err != nil {
		b.Fatal(err)
	}
	if err := tc.ChannelBind(peer.LocalAddr().(*net.UDPAddr).AddrPort(), 0x4000); err != nil {
		b.Fatal(err)
	}
	server := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 34780}
	msg := turnclient.ChannelData(make([]byte, 4+160), 0x4000, make([]byte, 160))
	buf := make([]byte, 2048)
	const window = 64
	b.ResetTimer()
	for done := 0; done < b.N; {
		n := min(window, b.N-done)
		for range n {
			if _, err := client.WriteTo(msg, server); err != nil {
				b.Fatal(err)
			}
		}
		for range n {
			_ = peer.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := peer.ReadFrom(buf); err != nil {
				b.Fatalf("after %d datagrams: %v", done, err)
			}
			done++
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/packet")
}
