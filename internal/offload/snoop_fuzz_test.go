package offload

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/pion/stun/v4"
)

// snoopRecordSize is sizeof(struct snoop_event) (bpf/turn.h).
const snoopRecordSize = 80

// decodeSnoop turns one raw ring-buffer sample into an event exactly as
// SnoopReader.Read does after reading it from the ring buffer.
func decodeSnoop(raw []byte) (SnoopEvent, error) {
	var r snoopRecord
	if err := binary.Read(bytes.NewReader(raw), binary.NativeEndian, &r); err != nil {
		return SnoopEvent{}, errors.New("offload: short snoop record")
	}
	return r.event()
}

// rawSnoop lays out a struct snoop_event by hand, field by field at the C
// offsets, independently of snoopRecord.
type rawSnoop struct {
	client, server         netip.AddrPort
	direction              uint8
	stunType               uint16
	txID                   [12]byte
	lifetime               uint32
	channel, flags         uint16
	xorFamily              uint8
	xorPort                uint16 // as on the wire (XOR'd)
	xorAddr                [16]byte
	family                 uint8
	clientPort, serverPort uint16
}

func (s rawSnoop) bytes() []byte {
	b := make([]byte, snoopRecordSize)
	put := func(off int, a netip.Addr) {
		if a.Is4() {
			v := a.As4()
			copy(b[off:], v[:])
		} else {
			v := a.As16()
			copy(b[off:], v[:])
		}
	}
	put(0, s.client.Addr())
	put(16, s.server.Addr())
	binary.BigEndian.PutUint16(b[32:], s.client.Port())
	binary.BigEndian.PutUint16(b[34:], s.server.Port())
	b[36] = afInet6
	if s.client.Addr().Is4() {
		b[36] = afInet
	}
	b[37] = s.direction
	binary.NativeEndian.PutUint16(b[38:], s.stunType)
	copy(b[40:52], s.txID[:])
	binary.NativeEndian.PutUint32(b[52:], s.lifetime)
	binary.NativeEndian.PutUint16(b[56:], s.channel)
	binary.NativeEndian.PutUint16(b[58:], s.flags)
	b[60] = s.xorFamily
	binary.BigEndian.PutUint16(b[62:], s.xorPort)
	copy(b[64:], s.xorAddr[:])
	return b
}

// withXORAttr fills the XOR'd address of a record from the value of an
// XOR-PEER-ADDRESS attribute that pion/stun encoded for txID.
func withXORAttr(t testing.TB, s rawSnoop, ap netip.AddrPort) rawSnoop {
	m := stun.New()
	m.TransactionID = s.txID
	m.WriteHeader()
	if err := (stun.XORMappedAddress{IP: ap.Addr().AsSlice(), Port: int(ap.Port())}).AddToAs(m, stun.AttrXORPeerAddress); err != nil {
		t.Fatal(err)
	}
	v, err := m.Get(stun.AttrXORPeerAddress)
	if err != nil {
		t.Fatal(err)
	}
	s.xorFamily = v[1]
	s.xorPort = binary.BigEndian.Uint16(v[2:4])
	copy(s.xorAddr[:], v[4:])
	s.flags |= snoopHasAddress
	return s
}

// FuzzSnoopRecord: decoding a ring-buffer record of any length never
// panics; one shorter than struct snoop_event is an error; every field
// lands where bpf/turn.h puts it; the XOR'd address decodes to what pion/stun
// reads from an XOR-PEER-ADDRESS attribute with the same bytes and
// transaction id (and to an independent XOR with the magic cookie and the
// transaction id); an address family other than 1 or 2 is an error.
func FuzzSnoopRecord(f *testing.F) {
	txid := [12]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	bind := rawSnoop{client: netip.MustParseAddrPort("10.10.1.2:40000"), server: netip.MustParseAddrPort("10.10.1.1:3478"),
		direction: uint8(SnoopRequest), stunType: stun.NewType(stun.MethodChannelBind, stun.ClassRequest).Value(),
		txID: txid, channel: 0x4007, flags: snoopHasChannel}
	f.Add(withXORAttr(f, bind, netip.MustParseAddrPort("203.0.113.9:6000")).bytes())
	alloc := rawSnoop{client: netip.MustParseAddrPort("[2001:db8::2]:40000"), server: netip.MustParseAddrPort("[2001:db8::1]:3478"),
		direction: uint8(SnoopResponse), stunType: stun.NewType(stun.MethodAllocate, stun.ClassSuccessResponse).Value(),
		txID: txid, lifetime: 600, flags: snoopHasLifetime}
	f.Add(withXORAttr(f, alloc, netip.MustParseAddrPort("[2001:db8::7]:50123")).bytes())
	f.Add(alloc.bytes())
	bad := withXORAttr(f, bind, netip.MustParseAddrPort("203.0.113.9:6000"))
	bad.xorFamily = 3
	f.Add(bad.bytes())
	f.Add(bind.bytes()[:snoopRecordSize-1])
	f.Add(append(bind.bytes(), 0xff, 0xff))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, raw []byte) {
		ev, err := decodeSnoop(raw)
		if len(raw) < snoopRecordSize {
			if err == nil {
				t.Fatalf("a %d-byte record decoded as %+v", len(raw), ev)
			}
			return
		}
		if raw[36] != afInet && raw[36] != afInet6 {
			if err == nil {
				t.Fatalf("5-tuple family %d decoded as %v %v", raw[36], ev.Client, ev.Server)
			}
			return
		}
		flags := binary.NativeEndian.Uint16(raw[58:])
		xorFamily := raw[60]
		hasAddr := flags&snoopHasAddress != 0
		if hasAddr && xorFamily != 1 && xorFamily != 2 {
			if err == nil {
				t.Fatalf("address family %d decoded as %v", xorFamily, ev.Address)
			}
			return
		}
		if err != nil {
			t.Fatalf("%x: %v", raw, err)
		}

		// The 5-tuple, at the offsets of struct snoop_event.
		want := func(off int) netip.Addr {
			if raw[36] == afInet {
				return netip.AddrFrom4([4]byte(raw[off : off+4]))
			}
			return netip.AddrFrom16([16]byte(raw[off : off+16]))
		}
		client := netip.AddrPortFrom(want(0), binary.BigEndian.Uint16(raw[32:]))
		server := netip.AddrPortFrom(want(16), binary.BigEndian.Uint16(raw[34:]))
		if ev.Client != client || ev.Server != server {
			t.Fatalf("5-tuple %v %v, want %v %v", ev.Client, ev.Server, client, server)
		}
		if ev.Direction != SnoopDirection(raw[37]) || ev.Type != binary.NativeEndian.Uint16(raw[38:]) ||
			ev.TransactionID != [12]byte(raw[40:52]) ||
			ev.Lifetime != binary.NativeEndian.Uint32(raw[52:]) || ev.HasLifetime != (flags&snoopHasLifetime != 0) ||
			ev.Channel != binary.NativeEndian.Uint16(raw[56:]) || ev.HasChannel != (flags&snoopHasChannel != 0) ||
			ev.HasAddress != hasAddr {
			t.Fatalf("%x decoded as %+v", raw, ev)
		}
		if !hasAddr {
			if ev.Address.IsValid() {
				t.Fatalf("address %v without the address flag", ev.Address)
			}
			return
		}

		// Independently: XOR with the magic cookie (IPv4) or cookie+txid (IPv6).
		key := append([]byte{0x21, 0x12, 0xa4, 0x42}, raw[40:52]...)
		port := binary.BigEndian.Uint16(raw[62:]) ^ 0x2112
		n := 4
		if xorFamily == 2 {
			n = 16
		}
		ip := make([]byte, n)
		for i := range ip {
			ip[i] = raw[64+i] ^ key[i]
		}
		addr, _ := netip.AddrFromSlice(ip)
		if wantAP := netip.AddrPortFrom(addr, port); ev.Address != wantAP {
			t.Fatalf("XOR'd address decoded as %v, want %v", ev.Address, wantAP)
		}

		// And as pion/stun reads the same attribute bytes.
		m := stun.New()
		m.TransactionID = ev.TransactionID
		m.WriteHeader()
		value := append([]byte{0, xorFamily}, raw[62:64]...)
		value = append(value, raw[64:64+n]...)
		m.Add(stun.AttrXORPeerAddress, value)
		var x stun.XORMappedAddress
		if err := x.GetFromAs(m, stun.AttrXORPeerAddress); err != nil {
			t.Fatalf("pion refuses %x: %v", value, err)
		}
		pa, _ := netip.AddrFromSlice(x.IP)
		if pionAP := netip.AddrPortFrom(pa, uint16(x.Port)); ev.Address != pionAP {
			t.Fatalf("XOR'd address decoded as %v, pion/stun reads %v", ev.Address, pionAP)
		}
	})
}
