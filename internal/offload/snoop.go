package offload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

// SnoopDirection says which hook parsed a control message.
type SnoopDirection uint8

const (
	SnoopRequest  SnoopDirection = 1 // a client's request, at XDP ingress
	SnoopResponse SnoopDirection = 2 // the server's response, at TC egress
)

// SnoopEvent is what the BPF snooper parsed from one TURN control message.
type SnoopEvent struct {
	Direction     SnoopDirection
	Client        netip.AddrPort
	Server        netip.AddrPort
	Type          uint16 // STUN message type (method and class)
	TransactionID [12]byte
	Channel       uint16 // with HasChannel
	HasChannel    bool
	Lifetime      uint32 // seconds, with HasLifetime
	HasLifetime   bool
	Address       netip.AddrPort // XOR-PEER-ADDRESS or XOR-RELAYED-ADDRESS, with HasAddress
	HasAddress    bool
}

// snoopRecord mirrors struct snoop_event (bpf/turn.h).
type snoopRecord struct {
	Client, Server         [16]byte
	ClientPort, ServerPort [2]byte
	Family, Direction      uint8
	StunType               uint16
	TxID                   [12]byte
	Lifetime               uint32
	Channel, Flags         uint16
	XorFamily, Pad         uint8
	XorPort                [2]byte
	XorAddr                [16]byte
}

const (
	snoopHasChannel  = 0x1
	snoopHasLifetime = 0x2
	snoopHasAddress  = 0x4
	stunMagicCookie  = 0x2112A442
)

func (r *snoopRecord) event() (SnoopEvent, error) {
	ev := SnoopEvent{
		Direction: SnoopDirection(r.Direction), Type: r.StunType, TransactionID: r.TxID,
		Channel: r.Channel, HasChannel: r.Flags&snoopHasChannel != 0,
		Lifetime: r.Lifetime, HasLifetime: r.Flags&snoopHasLifetime != 0,
	}
	if r.Family != afInet && r.Family != afInet6 {
		return ev, fmt.Errorf("offload: snooped 5-tuple family %d", r.Family)
	}
	addr := func(b [16]byte) netip.Addr {
		if r.Family == afInet {
			return netip.AddrFrom4([4]byte(b[:4]))
		}
		return netip.AddrFrom16(b)
	}
	ev.Client = netip.AddrPortFrom(addr(r.Client), binary.BigEndian.Uint16(r.ClientPort[:]))
	ev.Server = netip.AddrPortFrom(addr(r.Server), binary.BigEndian.Uint16(r.ServerPort[:]))
	if r.Flags&snoopHasAddress != 0 {
		// RFC 8489 14.2: XOR with the magic cookie (and the transaction id for IPv6).
		var key [16]byte
		binary.BigEndian.PutUint32(key[:], stunMagicCookie)
		copy(key[4:], r.TxID[:])
		port := binary.BigEndian.Uint16(r.XorPort[:]) ^ uint16(stunMagicCookie>>16)
		var a [16]byte
		for i := range a {
			a[i] = r.XorAddr[i] ^ key[i]
		}
		switch r.XorFamily {
		case 1:
			ev.Address = netip.AddrPortFrom(netip.AddrFrom4([4]byte(a[:4])), port)
		case 2:
			ev.Address = netip.AddrPortFrom(netip.AddrFrom16(a), port)
		default:
			return ev, fmt.Errorf("offload: snooped address family %d", r.XorFamily)
		}
		ev.HasAddress = true
	}
	return ev, nil
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
	l, ok := e.reusePinnedLink(pin, e.snoop)
	if !ok {
		if l, err = link.AttachTCX(link.TCXOptions{Interface: iface.Index, Program: e.snoop, Attach: ebpf.AttachTCXEgress}); err != nil {
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

// SnoopReader reads what the snooper parsed.
type SnoopReader struct{ r *ringbuf.Reader }

// SnoopReader opens the snooper's ring buffer.
func (e *Engine) SnoopReader() (*SnoopReader, error) {
	r, err := ringbuf.NewReader(e.objs.SnoopEvents)
	if err != nil {
		return nil, fmt.Errorf("offload: snoop reader: %w", err)
	}
	return &SnoopReader{r: r}, nil
}

// ErrClosed is returned by Read after Close.
var ErrClosed = ringbuf.ErrClosed

// Read blocks for the next parsed control message.
func (s *SnoopReader) Read() (SnoopEvent, error) {
	rec, err := s.r.Read()
	if err != nil {
		return SnoopEvent{}, err
	}
	var r snoopRecord
	if err := binary.Read(bytes.NewReader(rec.RawSample), binary.NativeEndian, &r); err != nil {
		return SnoopEvent{}, errors.New("offload: short snoop record")
	}
	return r.event()
}

// SetDeadline bounds the next Reads (tests).
func (s *SnoopReader) SetDeadline(t time.Time) { s.r.SetDeadline(t) }

// Close stops reading; a blocked Read returns ErrClosed.
func (s *SnoopReader) Close() error { return s.r.Close() }
