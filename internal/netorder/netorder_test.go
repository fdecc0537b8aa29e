package netorder

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"unsafe"
)

// In memory, each value's bytes are the network-order bytes.
func TestMemoryHoldsNetworkOrder(t *testing.T) {
	p := Port(0x1234)
	if b := (*[2]byte)(unsafe.Pointer(&p)); b[0] != 0x12 || b[1] != 0x34 {
		t.Errorf("Port(0x1234) in memory: % x", b[:])
	}
	if Port(Port(40000)) != 40000 {
		t.Error("Port is not its own inverse")
	}
	w := Word(0xdeadbeef)
	if b := (*[4]byte)(unsafe.Pointer(&w)); binary.BigEndian.Uint32(b[:]) != 0xdeadbeef {
		t.Errorf("Word in memory: % x", b[:])
	}
	for _, s := range []string{"10.201.1.1", "::ffff:10.201.1.1"} {
		v := IPv4(netip.MustParseAddr(s))
		if b := (*[4]byte)(unsafe.Pointer(&v)); *b != [4]byte{10, 201, 1, 1} {
			t.Errorf("IPv4(%s) in memory: % x", s, b[:])
		}
	}
}
