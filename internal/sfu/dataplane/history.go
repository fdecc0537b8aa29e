package dataplane

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
)

// The retransmission history (bpf/history.h): each video sender's recent
// packets, kept as they are forwarded, so that the SFU answers a
// receiver's NACK itself, and a packet already forwarded (a retransmission
// the sender was asked for too late, a duplicate) goes to nobody again.
const (
	// HistorySlots is how many of a sender's packets are kept: at least a
	// second of video up to 512 packets a second (HISTORY_SLOTS).
	HistorySlots   = 512
	historyData    = 1472    // HISTORY_DATA
	historyStreams = 512     // HISTORY_STREAMS
	historyValid   = 1 << 16 // HISTORY_VALID
)

// historyRing is a sender's history in user space (the user plane's, and
// the eBPF plane's slow path's view is the kernel's map).
type historyRing struct {
	mu sync.Mutex
	e  [HistorySlots]historyPacket
}

type historyPacket struct {
	tag  uint32 // historyValid | seq; 0: empty
	ts   uint32
	at   time.Duration
	data []byte
}

// seenOrKeep reports whether packet p (sequence number seq, timestamp ts)
// is one the ring holds already; if not, it keeps it.
func (h *historyRing) seenOrKeep(seq uint16, ts uint32, p []byte, now time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := &h.e[seq%HistorySlots]
	tag := historyValid | uint32(seq)
	if e.tag == tag && e.ts == ts {
		return true
	}
	e.tag = 0
	if len(p) == 0 || len(p) > historyData {
		return false
	}
	e.tag, e.ts, e.at, e.data = tag, ts, now, append(e.data[:0], p...)
	return false
}

// packet is a copy of packet seq, if the ring holds it.
func (h *historyRing) packet(seq uint16) ([]byte, time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e := &h.e[seq%HistorySlots]
	if e.tag != historyValid|uint32(seq) {
		return nil, 0, false
	}
	return append([]byte(nil), e.data...), e.at, true
}

// The eBPF plane's history: the program looks entries up and rewrites
// them; user space makes a sender's HistorySlots entries when it gets a
// history and removes them with it, so no packet allocates.

// keepHistory makes stream id's entries; a full map leaves it without a
// history (its receivers' NACKs then go to the sender).
func (d *DataPlane) keepHistory(id uint32) error {
	keys := make([]sfuHistoryKey, HistorySlots)
	vals := make([]sfuHistoryEntry, HistorySlots)
	for i := range keys {
		keys[i] = sfuHistoryKey{Stream: id, Index: uint32(i)}
	}
	if _, err := d.objs.History.BatchUpdate(keys, vals, nil); err != nil {
		d.dropHistory(id)
		return fmt.Errorf("dataplane: history: %w", err)
	}
	return nil
}

func (d *DataPlane) dropHistory(id uint32) {
	for i := range uint32(HistorySlots) {
		_ = d.objs.History.Delete(sfuHistoryKey{Stream: id, Index: i})
	}
}

// kernelPacket is packet seq of stream id from the kernel's history.
func (d *DataPlane) kernelPacket(id uint32, seq uint16) ([]byte, time.Duration, bool) {
	var e sfuHistoryEntry
	if err := d.objs.History.Lookup(sfuHistoryKey{Stream: id, Index: uint32(seq) % HistorySlots}, &e); err != nil {
		return nil, 0, false
	}
	tag := historyValid | uint32(seq)
	// head and tail differ while the program rewrites the entry (the copy
	// may hold half of each packet).
	if e.Head != tag || e.Tail != tag || e.Len == 0 || int(e.Len) > historyData {
		return nil, 0, false
	}
	return append([]byte(nil), e.Data[:e.Len]...), time.Duration(e.At), true
}

// kernelSeenOrKeep is history_seen_or_keep for what the slow path forwards.
func (d *DataPlane) kernelSeenOrKeep(id uint32, seq uint16, ts uint32, p []byte) bool {
	k := sfuHistoryKey{Stream: id, Index: uint32(seq) % HistorySlots}
	var e sfuHistoryEntry
	if err := d.objs.History.Lookup(k, &e); err != nil {
		return false // no history
	}
	tag := historyValid | uint32(seq)
	if e.Head == tag && e.Tail == tag && e.Ts == ts {
		return true
	}
	e = sfuHistoryEntry{}
	if len(p) > 0 && len(p) <= historyData {
		e.Head, e.Tail, e.Ts, e.At, e.Len = tag, tag, ts, uint64(monoNow()), uint16(len(p))
		copy(e.Data[:], p)
	}
	if err := d.objs.History.Update(k, &e, ebpf.UpdateExist); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return false
	}
	return false
}
