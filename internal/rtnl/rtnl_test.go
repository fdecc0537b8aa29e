package rtnl

import "testing"

// Attributes written are read back, padded to 4 bytes.
func TestAttrs(t *testing.T) {
	b := AppendAttr(nil, 1, []byte{1, 2, 3})
	b = AppendAttr(b, 7, []byte("eth0\x00"))
	if len(b) != 8+12 {
		t.Fatalf("%d bytes: %x", len(b), b)
	}
	attrs, err := Attrs(b)
	if err != nil || len(attrs) != 2 || attrs[0].Type != 1 || string(attrs[0].Value) != "\x01\x02\x03" || CString(attrs[1].Value) != "eth0" {
		t.Fatalf("%+v, %v", attrs, err)
	}
	if _, err := Attrs([]byte{200, 0, 1, 0}); err == nil {
		t.Fatal("an attribute longer than its buffer was read")
	}
}
