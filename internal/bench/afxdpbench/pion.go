package afxdpbench

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/webrtc/v4"

	"github.com/ebrtc/ebrtc/internal/bench"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// PionReceiver is `ebrtc rx-probe --pion-offer`: a pion/webrtc peer whose
// ICE runs on addr through the receive path rx answers the offer in
// offerFile (printing "answer" and its JSON), then takes a data channel's
// bytes (reliable, ordered) and RTP stamped with the send time until it
// has `bytes` and `packets` of them or SIGTERM, and prints "result" and
// its PionResult: throughput from the first message to the last, as the
// receiver saw them, and one-way latency.
func PionReceiver(rx, addr, offerFile string, bytes, packets int, out io.Writer) error {
	conn, err := pionConn(rx, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	peer, err := testbed.PionPeer(conn, webrtc.NetworkTypeUDP4)
	if err != nil {
		return err
	}
	defer peer.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	rec := &pionReceipt{bytesWanted: bytes, packetsWanted: packets, done: make(chan struct{}), latencies: make([]uint64, 0, packets)}
	peer.OnDataChannel(func(d *webrtc.DataChannel) {
		d.OnMessage(func(m webrtc.DataChannelMessage) { rec.message(len(m.Data)) })
	})
	peer.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		for {
			p, _, err := tr.ReadRTP()
			if err != nil {
				return
			}
			if len(p.Payload) >= 8 {
				rec.packet(bench.MonotonicNs() - binary.BigEndian.Uint64(p.Payload))
			}
		}
	})
	answer, err := answerOffer(peer, offerFile)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "answer %s\n", answer)
	select {
	case <-rec.done:
	case <-ctx.Done():
	}
	res := rec.result(rx)
	if xc, ok := conn.(*afxdp.Conn); ok {
		st, _ := xc.Stats()
		res.ViaKernel = st.ViaKernel
	}
	b, err := json.Marshal(&res)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "result %s\n", b)
	return err
}

// pionConn is the receiver's socket: an AF_XDP conn or a kernel one, with
// the testbed's large buffers either way.
func pionConn(rx, addr string) (net.PacketConn, error) {
	switch rx {
	case "afxdp":
		lc := afxdp.ListenConfig{Control: testbed.LargeBuffers}
		return lc.ListenPacket(context.Background(), "udp4", addr)
	case "kernel":
		return (&net.ListenConfig{Control: testbed.LargeBuffers}).ListenPacket(context.Background(), "udp4", addr)
	}
	return nil, fmt.Errorf("rx-probe: rx %q (want kernel or afxdp)", rx)
}

// answerOffer sets the offer read from file and returns the answer, ICE
// gathered, as JSON.
func answerOffer(peer *webrtc.PeerConnection, file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var offer webrtc.SessionDescription
	if err := json.Unmarshal(b, &offer); err != nil {
		return nil, fmt.Errorf("offer %s: %w", file, err)
	}
	if err := peer.SetRemoteDescription(offer); err != nil {
		return nil, err
	}
	answer, err := testbed.Describe(peer, testbed.Answer)
	if err != nil {
		return nil, err
	}
	return json.Marshal(answer)
}

// pionReceipt is what the receiving peer has taken so far.
type pionReceipt struct {
	mu                         sync.Mutex
	bytesWanted, packetsWanted int
	bytes                      int
	first, last                time.Time // the first and the last message
	latencies                  []uint64
	done                       chan struct{}
	closed                     bool
}

func (r *pionReceipt) message(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	if r.bytes == 0 {
		r.first = now
	}
	r.bytes += n
	r.last = now
	r.check()
}

func (r *pionReceipt) packet(latency uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.latencies = append(r.latencies, latency)
	r.check()
}

func (r *pionReceipt) check() {
	if !r.closed && r.bytes >= r.bytesWanted && len(r.latencies) >= r.packetsWanted {
		r.closed = true
		close(r.done)
	}
}

func (r *pionReceipt) result(rx string) PionResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := PionResult{Name: rx, DataChannelBytes: r.bytes, RTPPacketsReceived: len(r.latencies)}
	// The first message's bytes arrived before the clock started.
	if d := r.last.Sub(r.first).Seconds(); d > 0 && r.bytes > pionMessage {
		res.DataChannelMbps = float64(r.bytes-pionMessage) * 8 / d / 1e6
	}
	lat := slices.Clone(r.latencies)
	slices.Sort(lat)
	if len(lat) > 0 {
		res.RTPLatencyP50Ns = float64(lat[len(lat)/2])
		res.RTPLatencyP99Ns = float64(lat[min(len(lat)*99/100, len(lat)-1)])
	}
	return res
}

// pionMessage is the data channel's message size.
const pionMessage = 16 << 10

// pionTrial has a pion/webrtc peer of this process in the client namespace
// send to `ebrtc rx-probe --pion-offer` in the server namespace, which
// receives through rx (on its own core with its interface's NAPI thread
// when isolated, as the probe trials' receiver): a data channel's
// throughput (o.PionBytes in 16 KiB messages, reliable and ordered), then
// RTP at 1 kHz stamped with the send time, for one-way latency.
func pionTrial(e *bench.Env, rx string, o Options) (PionResult, error) {
	res := PionResult{Name: rx}
	kc, err := testbed.ListenUDP(e.Testbed.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	if err != nil {
		return res, err
	}
	defer kc.Close()
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
	opened := make(chan struct{})
	dc.OnOpen(func() { close(opened) })
	offerFile, err := writeOffer(sender, e.WorkDir)
	if err != nil {
		return res, err
	}
	addr := netip.AddrPortFrom(testbed.ServerClientIP4, 5004)
	cmd := []string{e.Bin, "rx-probe", "--rx", rx, "--listen", addr.String(), "--pion-offer", offerFile,
		"--pion-bytes", strconv.Itoa(o.PionBytes), "--pion-packets", strconv.Itoa(o.PionPackets)}
	if e.Isolated() {
		cmd = append([]string{"taskset", "-c", strconv.Itoa(e.CoreCPU())}, cmd...)
	}
	out := &testbed.LineBuffer{}
	p, err := testbed.Start(e.Testbed.Server, io.MultiWriter(out, e.Log), cmd[0], cmd[1:]...)
	if err != nil {
		return res, err
	}
	defer p.Stop(5 * time.Second)
	if err := out.Wait("answer ", 30*time.Second, p); err != nil {
		return res, err
	}
	core, err := e.Pin(p.Pid()) // the probe's core (isolated only)
	if err != nil {
		return res, err
	}
	line, _ := out.Find("answer ")
	var answer webrtc.SessionDescription
	if err := json.Unmarshal([]byte(line), &answer); err != nil {
		return res, fmt.Errorf("answer: %w", err)
	}
	if err := sender.SetRemoteDescription(answer); err != nil {
		return res, err
	}
	select {
	case <-opened:
	case <-time.After(20 * time.Second):
		return res, errors.New("data channel not open after 20 s")
	}
	before, start := uint64(0), time.Now()
	if e.Isolated() {
		before, _ = core.RunTime()
	}
	if err := sendData(dc, o.PionBytes); err != nil {
		return res, err
	}
	var busy, perCore float64
	if e.Isolated() {
		if after, err := core.RunTime(); err == nil && after > before {
			busy = float64(after-before) / float64(time.Since(start))
			perCore = float64(o.PionBytes) * 8 / float64(after-before) * 1e3 // bits/ns to Mbit/s
		}
	}
	if err := sendRTP(track, o.PionPackets); err != nil {
		return res, err
	}
	// Done once it has every RTP packet; a lost one (UDP) leaves it to
	// SIGTERM.
	if out.Wait("result ", 2*time.Second, p) != nil {
		if err := p.Stop(10 * time.Second); err != nil {
			return res, fmt.Errorf("receiver: %w\n%s", err, out.String())
		}
	}
	line, ok := out.Find("result ")
	if !ok {
		return res, fmt.Errorf("receiver printed no result:\n%s", out.String())
	}
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return res, err
	}
	res.ReceiverCore, res.MbpsPerCore = busy, perCore
	if res.DataChannelBytes < o.PionBytes {
		return res, fmt.Errorf("data channel: %d of %d bytes", res.DataChannelBytes, o.PionBytes)
	}
	return res, nil
}

// writeOffer writes the sender's offer, ICE gathered, to a file in dir.
func writeOffer(sender *webrtc.PeerConnection, dir string) (string, error) {
	offer, err := testbed.Describe(sender, testbed.Offer)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(offer)
	if err != nil {
		return "", err
	}
	file := filepath.Join(dir, "pion-offer.json")
	return file, os.WriteFile(file, b, 0o600)
}

// sendData sends n bytes on the data channel (at most 4 MiB buffered)
// and waits until they have left its buffer.
func sendData(dc *webrtc.DataChannel, n int) error {
	payload := make([]byte, pionMessage)
	deadline := time.Now().Add(60 * time.Second)
	wait := func(buffered uint64) error {
		for dc.BufferedAmount() > buffered {
			if time.Now().After(deadline) {
				return errors.New("data channel: still buffered after 60 s")
			}
			time.Sleep(200 * time.Microsecond)
		}
		return nil
	}
	for sent := 0; sent < n; sent += pionMessage {
		if err := wait(4 << 20); err != nil {
			return err
		}
		if err := dc.Send(payload); err != nil {
			return err
		}
	}
	return wait(0)
}

// sendRTP sends n RTP packets at 1 kHz, each stamped with its send time.
func sendRTP(track *webrtc.TrackLocalStaticRTP, n int) error {
	buf := make([]byte, 1000)
	next := time.Now()
	for i := range n {
		binary.BigEndian.PutUint64(buf, bench.MonotonicNs())
		p := rtp.Packet{Header: rtp.Header{Version: 2, SequenceNumber: uint16(i), Timestamp: uint32(i * 90)}, Payload: buf}
		if err := track.WriteRTP(&p); err != nil {
			return err
		}
		next = next.Add(time.Millisecond)
		time.Sleep(time.Until(next))
	}
	return nil
}
