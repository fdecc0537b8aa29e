package xsk

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ebrtc/ebrtc/internal/frame"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

func newBed(t *testing.T) *testbed.Testbed {
	t.Helper()
	testenv.RequireRoot(t)
	tb, err := testbed.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tb.Close() })
	return tb
}

// openIn opens a socket on queue 0 of the server's interface to the client.
func openIn(t *testing.T, tb *testbed.Testbed, cfg Config) (*Socket, error) {
	t.Helper()
	var s *Socket
	err := tb.Server.Do(func() error {
		ifi, err := net.InterfaceByName(testbed.ServerCliIface)
		if err != nil {
			return err
		}
		s, err = Open(ifi.Index, 0, cfg)
		return err
	})
	if s != nil {
		t.Cleanup(func() { s.Close() })
	}
	return s, err
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{{Frames: 100}, {TXFrames: 3}, {FrameSize: 1000}} {
		if _, err := Open(1, 0, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

// TestModes: veth binds copy mode only; asking for zero-copy says so.
func TestModes(t *testing.T) {
	tb := newBed(t)
	s, err := openIn(t, tb, Config{Frames: 64})
	if err != nil {
		t.Fatal(err)
	}
	if s.Mode() != Copy {
		t.Errorf("auto on veth bound %v, want copy", s.Mode())
	}
	s.Close()
	if _, err := openIn(t, tb, Config{Frames: 64, Mode: ZeroCopy}); err == nil || !strings.Contains(err.Error(), "zero-copy") {
		t.Errorf("zero-copy on veth: err = %v, want one naming zero-copy", err)
	}
	if s, err := openIn(t, tb, Config{Frames: 64, Mode: Copy}); err != nil || s.Mode() != Copy {
		t.Errorf("copy: %v", err)
	}
}

// TestFillRing: the fill ring takes at most its size; frames come back only
// through Receive, so a second round is refused until then.
func TestFillRing(t *testing.T) {
	tb := newBed(t)
	s, err := openIn(t, tb, Config{Frames: 64})
	if err != nil {
		t.Fatal(err)
	}
	addrs := make([]uint64, 100)
	for i := range addrs {
		addrs[i] = s.RXFrame(i % 64)
	}
	if n := s.Fill(addrs...); n != 64 {
		t.Errorf("fill ring took %d of 100, want its 64", n)
	}
	if n := s.Fill(addrs[:1]...); n != 0 {
		t.Errorf("a full fill ring took %d more", n)
	}
	if s.Pending() != 0 {
		t.Errorf("%d frames pending with no program attached", s.Pending())
	}
	for _, d := range []Desc{{Addr: 0, Len: 0}, {Addr: 2000, Len: 100}, {Addr: uint64(64 * 2048), Len: 10}} {
		if _, err := s.Frame(d); err == nil {
			t.Errorf("Frame(%+v) accepted", d)
		}
	}
}

// TestTransmit sends UDP frames built by package frame through the TX ring, four times
// round it, and the client receives each intact through its kernel socket.
func TestTransmit(t *testing.T) {
	tb := newBed(t)
	s, err := openIn(t, tb, Config{Frames: 64, TXFrames: 64})
	if err != nil {
		t.Fatal(err)
	}
	rx, err := testbed.ListenUDP(tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	var srcMAC, dstMAC net.HardwareAddr
	if err := tb.Server.Do(func() error {
		ifi, err := net.InterfaceByName(testbed.ServerCliIface)
		srcMAC = ifi.HardwareAddr
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := tb.Client.Do(func() error {
		ifi, err := net.InterfaceByName(testbed.ClientIface)
		dstMAC = ifi.HardwareAddr
		return err
	}); err != nil {
		t.Fatal(err)
	}
	from := netip.AddrPortFrom(testbed.ServerClientIP4, 4000)
	to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	const n = 256
	for i := range n {
		payload := make([]byte, 100+i)
		binary.BigEndian.PutUint32(payload, uint32(i))
		frame := frame.UDP{SrcMAC: srcMAC, DstMAC: dstMAC, Src: from, Dst: to, TTL: 64, Payload: payload}.Marshal()
		for {
			err := s.Send(frame)
			if !errors.Is(err, unix.ENOBUFS) {
				if err != nil {
					t.Fatal(err)
				}
				break
			}
			time.Sleep(100 * time.Microsecond) // all 64 in flight: wait for completions
		}
	}
	buf := make([]byte, 2048)
	for i := range n {
		rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		m, src, err := rx.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d: %v", i, n, err)
		}
		if m != 100+i || binary.BigEndian.Uint32(buf) != uint32(i) || src != from {
			t.Fatalf("datagram %d: %d bytes, number %d, from %v", i, m, binary.BigEndian.Uint32(buf), src)
		}
	}
	time.Sleep(10 * time.Millisecond)
	s.Complete()
	if s.InFlight() != 0 {
		t.Errorf("%d frames never completed", s.InFlight())
	}
	st, err := s.Stats()
	if err != nil || st.TxInvalid != 0 {
		t.Errorf("stats %+v, %v", st, err)
	}
}
