package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// pionTrial has a pion/webrtc peer in the client namespace send to one in
// the server namespace that receives through rx: a data channel's
// throughput (o.PionBytes in 16 KiB messages, reliable and ordered), then
// RTP at 1 kHz stamped with the send time, for one-way latency.
func pionTrial(tb *testbed.Testbed, rx string, o AFXDPOptions) (PionResult, error) {
	res := PionResult{Name: rx}
	var conn net.PacketConn
	err := tb.Server.Do(func() (err error) {
		addr := netip.AddrPortFrom(testbed.ServerClientIP4, 0).String()
		if rx == "afxdp" {
			lc := afxdp.ListenConfig{Control: testbed.LargeBuffers}
			conn, err = lc.ListenPacket(context.Background(), "udp4", addr)
			return err
		}
		conn, err = (&net.ListenConfig{Control: testbed.LargeBuffers}).ListenPacket(context.Background(), "udp4", addr)
		return err
	})
	if err != nil {
		return res, err
	}
	defer conn.Close()
	kc, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	if err != nil {
		return res, err
	}
	defer kc.Close()
	receiver, err := testbed.PionPeer(conn, webrtc.NetworkTypeUDP4)
	if err != nil {
		return res, err
	}
	defer receiver.Close()
	sender, err := testbed.PionPeer(kc, webrtc.NetworkTypeUDP4)
	if err != nil {
		return res, err
	}
	defer sender.Close()

	dc, err := sender.CreateDataChannel("bench", nil)
	if err != nil {
		return res, err
	}
	track, err := webrtc.NewTrackLocalStaticRTP(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8}, "video", "bench")
	if err != nil {
		return res, err
	}
	if _, err := sender.AddTrack(track); err != nil {
		return res, err
	}
	got := make(chan int, 1024)
	receiver.OnDataChannel(func(d *webrtc.DataChannel) {
		d.OnMessage(func(m webrtc.DataChannelMessage) { got <- len(m.Data) })
	})
	latencies := make(chan uint64, o.PionPackets)
	receiver.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		for {
			p, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			if len(p.Payload) >= 8 {
				select {
				case latencies <- monotonicNs() - binary.BigEndian.Uint64(p.Payload):
				default:
				}
			}
		}
	})
	opened := make(chan struct{})
	dc.OnOpen(func() { close(opened) })
	if err := testbed.ConnectPeers(sender, receiver); err != nil {
		return res, err
	}
	select {
	case <-opened:
	case <-time.After(20 * time.Second):
		return res, errors.New("data channel not open after 20 s")
	}

	const msg = 16 << 10
	payload := make([]byte, msg)
	start := time.Now()
	go func() {
		for sent := 0; sent < o.PionBytes; sent += msg {
			for dc.BufferedAmount() > 4<<20 {
				time.Sleep(200 * time.Microsecond)
			}
			if dc.Send(payload) != nil {
				return
			}
		}
	}()
	for received := 0; received < o.PionBytes; {
		select {
		case n := <-got:
			received += n
		case <-time.After(20 * time.Second):
			return res, fmt.Errorf("data channel: %d of %d bytes after a 20 s stall", received, o.PionBytes)
		}
	}
	res.DataChannelMbps = float64(o.PionBytes) * 8 / time.Since(start).Seconds() / 1e6
	if xc, ok := conn.(*afxdp.Conn); ok {
		st, _ := xc.Stats()
		res.ViaKernel = st.ViaKernel
	}

	buf := make([]byte, 1000)
	next := time.Now()
	for i := range o.PionPackets {
		binary.BigEndian.PutUint64(buf, monotonicNs())
		p := rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(i), Timestamp: uint32(i * 90)}, Payload: buf}
		if err := track.WriteRTP(&p); err != nil {
			return res, err
		}
		next = next.Add(time.Millisecond)
		time.Sleep(time.Until(next))
	}
	time.Sleep(200 * time.Millisecond)
	var lat []uint64
	for len(latencies) > 0 {
		lat = append(lat, <-latencies)
	}
	slices.Sort(lat)
	res.RTPPacketsReceived = len(lat)
	if len(lat) > 0 {
		res.RTPLatencyP50Ns = float64(lat[len(lat)/2])
		res.RTPLatencyP99Ns = float64(lat[min(len(lat)*99/100, len(lat)-1)])
	}
	return res, nil
}
