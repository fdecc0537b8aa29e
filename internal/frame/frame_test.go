package frame

import (
	"bytes"
	"net/netip"
	"testing"
)

// Known answer from RFC 1071 section 3 (the example sums to 0xddf2).
func TestChecksumRFC1071Example(t *testing.T) {
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Checksum(b); got != ^uint16(0xddf2) {
		t.Fatalf("checksum %#04x, want %#04x", got, ^uint16(0xddf2))
	}
}

func TestMarshalParseRoundTrip(t *testing.T) {
	for _, tc := range []struct{ src, dst string }{
		{"192.0.2.1:1000", "198.51.100.2:2000"},
		{"[2001:db8::1]:1000", "[2001:db8::2]:2000"},
	} {
		u := UDP{Src: netip.MustParseAddrPort(tc.src), Dst: netip.MustParseAddrPort(tc.dst), TTL: 9, TOS: 0xb8, Payload: []byte("hello, odd")}
		got, err := Parse(u.Marshal())
		if err != nil {
			t.Fatal(err)
		}
		if got.Src != u.Src || got.Dst != u.Dst || got.TTL != 9 || got.TOS != 0xb8 || !bytes.Equal(got.Payload, u.Payload) {
			t.Fatalf("round trip: got %+v", got)
		}
	}
}

func TestParseRejectsCorruptChecksum(t *testing.T) {
	u := UDP{Src: netip.MustParseAddrPort("192.0.2.1:1"), Dst: netip.MustParseAddrPort("192.0.2.2:2"), TTL: 64, Payload: []byte{1, 2, 3}}
	b := u.Marshal()
	b[len(b)-1] ^= 0xff
	if _, err := Parse(b); err == nil {
		t.Fatal("corrupted payload parsed without error")
	}
}

func TestChannelDataPadding(t *testing.T) {
	got := ChannelData(0x4001, []byte{9, 8, 7}, PadTo4(3), 0)
	want := []byte{0x40, 0x01, 0x00, 0x03, 9, 8, 7, 0}
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x, want % x", got, want)
	}
}
