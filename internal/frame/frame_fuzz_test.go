package frame

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
)

func sameUDP(a, b UDP) bool {
	return bytes.Equal(a.SrcMAC, b.SrcMAC) && bytes.Equal(a.DstMAC, b.DstMAC) && a.Src == b.Src && a.Dst == b.Dst &&
		a.TOS == b.TOS && a.TTL == b.TTL && a.DF == b.DF && a.ID == b.ID && a.FlowLabel == b.FlowLabel &&
		bytes.Equal(a.Payload, b.Payload) && a.NoChecksum == b.NoChecksum
}

func fuzzSeedFrames() [][]byte {
	mac1, mac2 := net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
	v4 := UDP{SrcMAC: mac1, DstMAC: mac2, Src: netip.MustParseAddrPort("192.0.2.1:40000"), Dst: netip.MustParseAddrPort("198.51.100.2:3478"),
		TOS: 0xb8, TTL: 64, DF: true, ID: 0x1234, Payload: ChannelData(0x4001, []byte("hello"), PadTo4(5), 0)}
	v6 := UDP{SrcMAC: mac2, DstMAC: mac1, Src: netip.MustParseAddrPort("[2001:db8::1]:50000"), Dst: netip.MustParseAddrPort("[2001:db8::2]:6000"),
		TOS: 0x2e, TTL: 3, FlowLabel: 0xabcde, Payload: []byte("media")}
	noCsum := v4
	noCsum.NoChecksum, noCsum.Payload = true, nil
	mapped := v6
	mapped.Src, mapped.Dst = netip.MustParseAddrPort("[::ffff:192.0.2.1]:1"), netip.MustParseAddrPort("[::ffff:192.0.2.2]:2")
	frag := v4.Marshal()
	frag[14+6] |= 0x20 // MF
	frag[14+10], frag[14+11] = 0, 0
	binary.BigEndian.PutUint16(frag[14+10:], Checksum(frag[14:14+20]))
	return [][]byte{v4.Marshal(), v6.Marshal(), noCsum.Marshal(), mapped.Marshal(), frag, v4.Marshal()[:30], {}}
}

// FuzzParse: Parse never panics on any bytes; what it accepts marshals
// back (Marshal) to a frame that parses to the same values, byte for byte
// the input but for what UDP does not model: the IPv4 flags other than DF,
// the fragment offset, and so the header checksum.
func FuzzParse(f *testing.F) {
	for _, b := range fuzzSeedFrames() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		u, err := Parse(raw)
		if err != nil {
			return
		}
		if !u.Src.IsValid() || !u.Dst.IsValid() || u.Src.Addr().Is4() != u.Dst.Addr().Is4() {
			t.Fatalf("%x parsed with addresses %v %v", raw, u.Src, u.Dst)
		}
		if u.NoChecksum && !u.Src.Addr().Is4() {
			t.Fatal("IPv6 frame without UDP checksum accepted")
		}
		out := u.Marshal()
		back, err := Parse(out)
		if err != nil {
			t.Fatalf("%x parsed as %+v, which marshals to %x, which does not parse: %v", raw, u, out, err)
		}
		if !sameUDP(u, back) {
			t.Fatalf("%x parsed as %+v, marshals and parses back as %+v", raw, u, back)
		}
		want := bytes.Clone(raw)
		if u.Src.Addr().Is4() {
			ip := want[ethLen:]
			ip[6] &= 0x40
			ip[7] = 0
			ip[10], ip[11] = 0, 0
			binary.BigEndian.PutUint16(ip[10:], Checksum(ip[:20]))
		}
		if !bytes.Equal(out, want) {
			t.Fatalf("%x parsed as %+v marshals to\n%x, want\n%x", raw, u, out, want)
		}
	})
}

// FuzzMarshal: a frame built from any field values parses back to them
// (the flow label is 20 bits; IPv6 always has a UDP checksum).
func FuzzMarshal(f *testing.F) {
	f.Add([]byte{192, 0, 2, 1}, []byte{198, 51, 100, 2}, uint16(40000), uint16(3478), uint8(0xb8), uint8(64), true, uint16(7), uint32(0), false, []byte("hello"))
	f.Add(bytes.Repeat([]byte{0x20}, 16), bytes.Repeat([]byte{0xfe}, 16), uint16(1), uint16(2), uint8(0), uint8(1), false, uint16(0), uint32(0xfffff), false, []byte{})
	f.Add([]byte{0, 0, 0, 0}, []byte{255, 255, 255, 255}, uint16(0), uint16(0), uint8(0xff), uint8(0), false, uint16(0xffff), uint32(0), true, []byte{0xff, 0xff})
	f.Fuzz(func(t *testing.T, src, dst []byte, sport, dport uint16, tos, ttl uint8, df bool, id uint16, flow uint32, noCsum bool, payload []byte) {
		if len(payload) > 1400 {
			return
		}
		var sa, da netip.Addr
		switch {
		case len(src) >= 16 && len(dst) >= 16:
			sa, da = netip.AddrFrom16([16]byte(src[:16])), netip.AddrFrom16([16]byte(dst[:16]))
		case len(src) >= 4 && len(dst) >= 4:
			sa, da = netip.AddrFrom4([4]byte(src[:4])), netip.AddrFrom4([4]byte(dst[:4]))
		default:
			return
		}
		u := UDP{SrcMAC: net.HardwareAddr{2, 1, 2, 3, 4, 5}, DstMAC: net.HardwareAddr{2, 5, 4, 3, 2, 1},
			Src: netip.AddrPortFrom(sa, sport), Dst: netip.AddrPortFrom(da, dport), TOS: tos, TTL: ttl, Payload: payload}
		if sa.Is4() {
			u.DF, u.ID, u.NoChecksum = df, id, noCsum
		} else {
			u.FlowLabel = flow & 0xfffff
		}
		got, err := Parse(u.Marshal())
		if err != nil {
			t.Fatalf("%+v marshals to a frame that does not parse: %v", u, err)
		}
		if !sameUDP(got, u) {
			t.Fatalf("%+v parses back as %+v", u, got)
		}
	})
}
