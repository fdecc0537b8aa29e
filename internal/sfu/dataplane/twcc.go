package dataplane

import (
	"encoding/binary"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Transport-wide sequence numbers per leg (bpf/twcc.h): each packet a
// receiver is sent carries its leg's own number, and the leg's log says
// when it left and how big it was, for the estimator that reads the
// receiver's feedback.
const (
	twccLegs = 4096 // TWCC_LEGS
	twccLog  = 512  // TWCC_LOG
)

// legTWCC is one leg's counter and log, laid out as struct leg_twcc: the
// eBPF plane's live in the shared mapping of the twcc_legs array (the
// program and user space both take numbers), the user plane's in Go.
type legTWCC struct {
	next atomic.Uint32
	_    uint32
	log  [twccLog]atomic.Uint64
}

// Sent is what a transport-wide sequence number went out as.
type Sent struct {
	At   time.Duration // CLOCK_MONOTONIC
	Size int           // RTP bytes
}

// take is the leg's next number, logged as sent now with size bytes.
func (l *legTWCC) take(size int) uint16 {
	seq := uint16(l.next.Add(1) - 1)
	l.log[seq%twccLog].Store(twccEntry(monoNow(), size, seq))
	return seq
}

// sent is what seq went out as, if the log still holds it.
func (l *legTWCC) sent(seq uint16) (Sent, bool) {
	v := l.log[seq%twccLog].Load()
	if v == 0 || uint16(v) != seq {
		return Sent{}, false
	}
	// The log keeps microseconds in 32 bits: unwrapped against now.
	now := monoNow()
	nowUS := uint32(now / time.Microsecond)
	at := now - time.Duration(nowUS-uint32(v>>32))*time.Microsecond
	return Sent{At: at, Size: int(v >> 16 & 0xffff)}, true
}

// reset starts a new leg's numbers from zero.
func (l *legTWCC) reset() {
	l.next.Store(0)
	for i := range l.log {
		l.log[i].Store(0)
	}
}

func twccEntry(at time.Duration, size int, seq uint16) uint64 {
	return uint64(uint32(at/time.Microsecond))<<32 | uint64(uint16(size))<<16 | uint64(seq)
}

// monoNow is CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func monoNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// MonoNow is the clock Sent.At is on.
func MonoNow() time.Duration { return monoNow() }

// twccMapping is the twcc_legs array mapped into user space.
type twccMapping struct{ mem []byte }

func mapTWCC(fd int) (*twccMapping, error) {
	size := int(unsafe.Sizeof(legTWCC{})) * twccLegs
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &twccMapping{mem: mem}, nil
}

// leg is entry i of the array (i < twccLegs).
func (m *twccMapping) leg(i uint32) *legTWCC {
	return (*legTWCC)(unsafe.Pointer(&m.mem[uintptr(i)*unsafe.Sizeof(legTWCC{})]))
}

func (m *twccMapping) close() error { return unix.Munmap(m.mem) }

// stampTWCC writes seq into the two bytes at off of RTP packet p.
func stampTWCC(p []byte, off int, seq uint16) { binary.BigEndian.PutUint16(p[off:], seq) }

// twccOffset is where the transport-wide sequence number of RTP packet p
// (header hdr bytes) is, under extension id; 0 when it has none of two bytes.
func twccOffset(p []byte, hdr int, id uint8) int {
	off, n := rtpExtensionAt(p, hdr, id)
	if n != 2 {
		return 0
	}
	return off
}

// ArrivalLog reads when a sender's transport-wide sequence numbers
// arrived (the data plane logs them as they come): the SFU is the
// sender's peer, and sends it transport-cc feedback from it.
type ArrivalLog struct {
	log     *legTWCC
	last    uint16
	started bool
}

// Arrival is one logged arrival.
type Arrival struct {
	Seq  uint16
	At   time.Duration // CLOCK_MONOTONIC
	Size int
}

// Read is what arrived since the last Read, in sequence order (numbers
// that never came are not there).
func (a *ArrivalLog) Read() []Arrival {
	if a == nil || a.log == nil {
		return nil
	}
	var out []Arrival
	for i := range a.log.log {
		v := a.log.log[i].Load()
		seq := uint16(v)
		if v == 0 || (a.started && int16(seq-a.last) <= 0) {
			continue
		}
		s, ok := a.log.sent(seq)
		if !ok {
			continue
		}
		out = append(out, Arrival{Seq: seq, At: s.At, Size: s.Size})
	}
	if len(out) == 0 {
		return nil
	}
	base := out[0].Seq - twccLog // the log spans at most twccLog numbers
	if a.started {
		base = a.last
	}
	slices.SortFunc(out, func(x, y Arrival) int { return int(x.Seq-base) - int(y.Seq-base) })
	a.last, a.started = out[len(out)-1].Seq, true
	return out
}

// arrived logs a sender's transport-wide number seq as arrived now.
func (l *legTWCC) arrived(seq uint16, size int, at time.Duration) {
	if at == 0 {
		at = monoNow()
	}
	l.log[seq%twccLog].Store(twccEntry(at, size, seq))
}

// arrivedUnknown records the transport-wide number of an RTP packet from
// a sender that names an SSRC it has not described (yet): padding on a
// simulcast encoding before a packet with its stream id, say. The numbers
// belong to the transport, not to an SSRC, and one left out of the
// feedback reads as lost to the sender's estimate.
func arrivedUnknown(sources []Source, p []byte, cl Classified, size int, at time.Duration, arrived func(seq uint16, size int, at time.Duration)) {
	i := slices.IndexFunc(sources, func(s Source) bool { return s.TWCCExt != 0 })
	if i < 0 || cl.Payload == nil {
		return
	}
	if off := twccOffset(p, len(p)-len(cl.Payload), sources[i].TWCCExt); off > 0 {
		arrived(binary.BigEndian.Uint16(p[off:]), size, at)
	}
}
