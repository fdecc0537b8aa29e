package slots

import "testing"

// Every index once, then none; a freed one comes back first.
func TestPool(t *testing.T) {
	p := New(3)
	for want := uint32(0); want < 3; want++ {
		if got, ok := p.Get(); !ok || got != want {
			t.Fatalf("Get = %d, %v; want %d", got, ok, want)
		}
	}
	if _, ok := p.Get(); ok {
		t.Fatal("a fourth index from a pool of 3")
	}
	p.Put(1)
	if got, ok := p.Get(); !ok || got != 1 {
		t.Fatalf("after Put(1): Get = %d, %v", got, ok)
	}
}

// Reserved indexes are not handed out again; the gaps below them are.
func TestReserve(t *testing.T) {
	p := New(10)
	p.Reserve([]uint32{0, 2, 5})
	got := map[uint32]bool{}
	for {
		s, ok := p.Get()
		if !ok {
			break
		}
		if got[s] || s == 0 || s == 2 || s == 5 {
			t.Fatalf("index %d handed out twice or while reserved", s)
		}
		got[s] = true
	}
	if len(got) != 7 {
		t.Errorf("%d indexes free, want 7", len(got))
	}
}
