package turnserver

import (
	"encoding/binary"
	"testing"

	"github.com/pion/stun/v4"
)

// FuzzClassifyDatagram: the listener's screen never panics, and what it lets
// through is what pion can take: a STUN message whose header pion decodes
// with the length the datagram has, or ChannelData whose data fits with at
// most 3 bytes after it, the fast path's own rule.
func FuzzClassifyDatagram(f *testing.F) {
	m, _ := stun.Build(stun.TransactionID, stun.BindingRequest, stun.NewSoftware("x"), stun.Fingerprint)
	f.Add(m.Raw)
	f.Add([]byte{0x40, 0x00, 0x00, 0x03, 1, 2, 3, 0})
	f.Add([]byte{0x40, 0x00, 0x00, 0x03, 1, 2, 3, 0, 0, 0, 0, 0})
	f.Add([]byte{0x80, 0x60, 0, 1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		switch classifyDatagram(b) {
		case kindSTUN:
			if len(b) < 20 || b[0]>>6 != 0 || int(binary.BigEndian.Uint16(b[2:]))+20 != len(b) || !stun.IsMessage(b) {
				t.Fatalf("screen passed as STUN: % x", b)
			}
		case kindChannelData:
			if len(b) < 4 || b[0]>>6 != 1 {
				t.Fatalf("screen passed as ChannelData: % x", b)
			}
			if extra := len(b) - 4 - int(binary.BigEndian.Uint16(b[2:])); extra < 0 || extra > 3 {
				t.Fatalf("screen passed ChannelData with %d bytes after the data", extra)
			}
		case kindMalformed, kindChannelLength:
		default:
			t.Fatal("unknown kind")
		}
	})
}
