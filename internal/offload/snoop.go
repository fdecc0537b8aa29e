package offload

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/perf"
)

// SnoopDirection says which hook captured a control message.
type SnoopDirection uint8

const (
	SnoopRequest  SnoopDirection = 1 // a client's request, at XDP ingress
	SnoopResponse SnoopDirection = 2 // the server's response, at TC egress
)

// SnoopEvent is one captured TURN control message: the whole Ethernet frame.
type SnoopEvent struct {
	Direction SnoopDirection
	Ifindex   int
	Frame     []byte
}

// AttachSnoopEgress attaches the response snooper to an interface's TC
// egress (tcx). Responses are learned only here, leaving this host, so
// nothing arriving from the network can pose as the server.
func (e *Engine) AttachSnoopEgress(ifname string) error {
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return fmt.Errorf("offload: interface %q: %w", ifname, err)
	}
	pin := e.pinPath("tc_egress_" + ifname)
	l, ok := e.reusePinnedLink(pin, e.objs.TurnSnoopEgress)
	if !ok {
		if l, err = link.AttachTCX(link.TCXOptions{Interface: iface.Index, Program: e.objs.TurnSnoopEgress, Attach: ebpf.AttachTCXEgress}); err != nil {
			return fmt.Errorf("offload: attach TC egress snooper to %s: %w", ifname, err)
		}
		if pin != "" {
			if err := l.Pin(pin); err != nil {
				l.Close()
				return fmt.Errorf("offload: pin TC link: %w", err)
			}
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.tcLinks = append(e.tcLinks, l)
	return nil
}

// SnoopReader reads captured control messages.
type SnoopReader struct{ r *perf.Reader }

// SnoopReader opens the capture buffer (per CPU, bufferPages pages each).
func (e *Engine) SnoopReader(bufferPages int) (*SnoopReader, error) {
	r, err := perf.NewReader(e.objs.SnoopEvents, bufferPages*4096)
	if err != nil {
		return nil, fmt.Errorf("offload: snoop reader: %w", err)
	}
	return &SnoopReader{r: r}, nil
}

// ErrClosed is returned by Read after Close.
var ErrClosed = perf.ErrClosed

// Read blocks for the next event. Lost events (a full buffer) are reported
// as an error: the TURN server still handled them; only learning missed them.
func (s *SnoopReader) Read() (SnoopEvent, error) {
	rec, err := s.r.Read()
	if err != nil {
		return SnoopEvent{}, err
	}
	if rec.LostSamples > 0 {
		return SnoopEvent{}, fmt.Errorf("offload: %d control messages lost before learning", rec.LostSamples)
	}
	// struct snoop_meta: u32 ifindex, u8 direction, 3 pad; then the frame.
	const metaLen = 8
	if len(rec.RawSample) < metaLen {
		return SnoopEvent{}, errors.New("offload: short snoop record")
	}
	return SnoopEvent{
		Ifindex:   int(binary.NativeEndian.Uint32(rec.RawSample)),
		Direction: SnoopDirection(rec.RawSample[4]),
		Frame:     rec.RawSample[metaLen:],
	}, nil
}

// Close stops reading; a blocked Read returns ErrClosed.
func (s *SnoopReader) Close() error { return s.r.Close() }
