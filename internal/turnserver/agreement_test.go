package turnserver_test

import (
	"net"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// The fast path and user space relay the same datagrams: checked with the
// fast path on and off, on the cases where they used to differ.

// A permission that expires while its channel is still bound stops the
// relaying both ways on both paths (RFC 8656 section 9).
func TestPathsAgreeOnPermissionExpiry(t *testing.T) {
	for _, mode := range []string{"xdp", "off"} {
		t.Run(mode, func(t *testing.T) {
			tb := newTestbed(t)
			r := startRelay(t, tb, "--offload", mode, "--permission-lifetime", "2s", "--channel-lifetime", "1h")
			c := minimalClient(t, tb, false)
			peer := newPeer(t, tb, testbed.PeerIP4)
			testenv.Must(t, c.ChannelBind(peerAddr(peer), 0x4000))
			bound := time.Now()
			waitRelayed(t, func() error { return c.SendChannelData(0x4000, []byte("to-peer")) }, peer)
			waitRelayed(t, func() error {
				_, err := peer.WriteTo([]byte("to-client"), net.UDPAddrFromAddrPort(c.Relay))
				return err
			}, c.conn)

			time.Sleep(time.Until(bound.Add(2500 * time.Millisecond))) // the permission's 2 s, and some
			if m := metrics(t, r); m["ebrtc_turn_channels"] != 1 || m["ebrtc_xdp_channels"] != 0 {
				t.Fatalf("channels %v, in the fast path %v: want the binding alive and out of the fast path",
					m["ebrtc_turn_channels"], m["ebrtc_xdp_channels"])
			}
			marker := []byte("after-permission-expiry")
			for range 10 {
				testenv.Must(t, c.SendChannelData(0x4000, marker))
				if _, err := peer.WriteTo(marker, net.UDPAddrFromAddrPort(c.Relay)); err != nil {
					t.Fatal(err)
				}
			}
			if n := countMarked(peer, marker); n != 0 {
				t.Errorf("peer received %d datagrams after the permission expired", n)
			}
			if n := countMarked(c.conn, marker); n != 0 {
				t.Errorf("client received %d datagrams after the permission expired", n)
			}
		})
	}
}

// ChannelData may carry up to 3 bytes of padding over UDP (RFC 8656 section
// 12.5); with more after the data, neither path relays it.
func TestPathsAgreeOnChannelDataLength(t *testing.T) {
	for _, mode := range []string{"xdp", "off"} {
		t.Run(mode, func(t *testing.T) {
			tb := newTestbed(t)
			r := startRelay(t, tb, "--offload", mode)
			c := minimalClient(t, tb, false)
			peer := newPeer(t, tb, testbed.PeerIP4)
			testenv.Must(t, c.ChannelBind(peerAddr(peer), 0x4000))
			waitRelayed(t, func() error { return c.SendChannelData(0x4000, []byte("to-peer")) }, peer)
			if mode == "xdp" {
				waitMetric(t, r, "the channel in the fast path", func(m testbed.Metrics) bool { return m["ebrtc_xdp_channels"] == 1 })
			}
			data := []byte("eleven-byte") // 1 byte of padding to a multiple of 4
			for extra := 0; extra <= 6; extra++ {
				msg := append(turnclient.ChannelData(make([]byte, 4+len(data)), 0x4000, data), make([]byte, extra)...)
				if _, err := c.conn.WriteTo(msg, net.UDPAddrFromAddrPort(server4)); err != nil {
					t.Fatal(err)
				}
				n := countMarked(peer, data)
				if want := map[bool]int{true: 1, false: 0}[extra <= 3]; n != want {
					t.Errorf("%d bytes after the data: peer received %d, want %d", extra, n, want)
				}
			}
			if m := metrics(t, r); m[`ebrtc_turn_dropped_total{reason="channel_length"}`] != 3 {
				t.Errorf("channel_length drops: %v, want 3", m[`ebrtc_turn_dropped_total{reason="channel_length"}`])
			}
		})
	}
}
