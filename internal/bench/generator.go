package bench

import (
	"encoding/binary"
	"errors"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// Every datagram's payload starts with this header; the rest is filler.
//
//	0      8        16      20      24
//	| seq  | sent ns | flow  | magic |
const (
	headerLen = 24
	magic     = 0xeb27c0de
	batchSize = 32
)

// MinSize is the smallest payload the generator sends.
const MinSize = headerLen

// Header is what the generator stamps on each datagram.
type Header struct {
	Seq    uint64
	SentNs uint64 // MonotonicNs as it was sent
	Flow   uint32
}

// ParseHeader reads the generator's header at the start of p; ok is false
// for a datagram the generator did not send.
func ParseHeader(p []byte) (h Header, ok bool) {
	if len(p) < headerLen || binary.BigEndian.Uint32(p[20:]) != magic {
		return Header{}, false
	}
	return Header{Seq: binary.BigEndian.Uint64(p), SentNs: binary.BigEndian.Uint64(p[8:]), Flow: binary.BigEndian.Uint32(p[16:])}, true
}

// MonotonicNs is CLOCK_MONOTONIC, which every namespace shares (no time
// namespaces), so send and receive stamps compare across them.
func MonotonicNs() uint64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return uint64(ts.Nano())
}

// Direction is one way of one flow: who sends to where, with what
// framing, and who receives (Recv nil: RunTrial does not count it, a
// receiver of its own reads it).
type Direction struct {
	Send   *ipv4.PacketConn
	Dst    net.Addr
	Prefix []byte // ChannelData header template (nil: plain UDP)
	Recv   *ipv4.PacketConn
	Strip  int // bytes of framing in front of the payload at the receiver
	Flow   uint32

	sent     atomic.Uint64
	received atomic.Uint64
	jitter   jitter
}

// Run sends count datagrams of size bytes at rate per second in batches,
// stamped with their send time. It returns early when stop closes.
func (d *Direction) Run(count int, rate float64, size int, stop <-chan struct{}) error {
	msgs := make([]ipv4.Message, batchSize)
	bufs := make([][]byte, batchSize)
	for i := range bufs {
		bufs[i] = make([]byte, len(d.Prefix)+size)
		copy(bufs[i], d.Prefix)
		if d.Prefix != nil {
			binary.BigEndian.PutUint16(bufs[i][2:], uint16(size))
		}
		msgs[i] = ipv4.Message{Buffers: [][]byte{bufs[i]}, Addr: d.Dst}
	}
	// Batches amortise syscalls at high rates; at low rates they would only
	// add bursts (and their queueing) to the latency being measured.
	batch := int(min(max(rate/10000, 1), batchSize))
	start := time.Now()
	for seq := 0; seq < count; {
		select {
		case <-stop:
			return nil
		default:
		}
		n := min(batch, count-seq)
		now := MonotonicNs()
		for i := 0; i < n; i++ {
			p := bufs[i][len(d.Prefix):]
			binary.BigEndian.PutUint64(p, uint64(seq+i))
			binary.BigEndian.PutUint64(p[8:], now)
			binary.BigEndian.PutUint32(p[16:], d.Flow)
			binary.BigEndian.PutUint32(p[20:], magic)
		}
		sent, err := d.Send.WriteBatch(msgs[:n], 0)
		if err != nil && !errors.Is(err, unix.ENOBUFS) && !errors.Is(err, unix.EAGAIN) {
			return err
		}
		d.sent.Add(uint64(sent))
		seq += max(sent, 1)
		// Pace: sleep until this many datagrams are due.
		if due := start.Add(time.Duration(float64(seq) / rate * float64(time.Second))); time.Until(due) > 50*time.Microsecond {
			time.Sleep(time.Until(due))
		}
	}
	return nil
}

// receive counts datagrams and their one-way latency until stop closes.
func (d *Direction) receive(hist *Histogram, mu *sync.Mutex, stop <-chan struct{}) error {
	msgs := make([]ipv4.Message, batchSize)
	for i := range msgs {
		msgs[i].Buffers = [][]byte{make([]byte, 2048)}
	}
	local := newHistogram()
	defer func() {
		mu.Lock()
		hist.merge(local)
		mu.Unlock()
	}()
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		_ = d.Recv.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		n, err := d.Recv.ReadBatch(msgs, 0)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return err
		}
		now := MonotonicNs()
		for i := 0; i < n; i++ {
			b := msgs[i].Buffers[0][:msgs[i].N]
			if len(b) < d.Strip+headerLen {
				continue
			}
			p := b[d.Strip:]
			if binary.BigEndian.Uint32(p[20:]) != magic || binary.BigEndian.Uint32(p[16:]) != d.Flow {
				continue
			}
			sentAt := binary.BigEndian.Uint64(p[8:])
			if now < sentAt {
				continue
			}
			local.add(now - sentAt)
			d.jitter.update(sentAt, now)
			d.received.Add(1)
		}
	}
}

// jitter is the RFC 3550 interarrival jitter estimate (section 6.4.1).
type jitter struct {
	mu          sync.Mutex
	lastSent    uint64
	lastArrival uint64
	j           float64
}

func (j *jitter) update(sent, arrival uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.lastArrival != 0 {
		d := float64(int64(arrival-j.lastArrival) - int64(sent-j.lastSent))
		j.j += (math.Abs(d) - j.j) / 16
	}
	j.lastSent, j.lastArrival = sent, arrival
}

func (j *jitter) value() float64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.j
}

// Histogram of latencies: 1 µs buckets to 10 ms, then 100 µs buckets to 1 s.
type Histogram struct {
	fine   []uint64 // index: µs, 0-9999
	coarse []uint64 // index: 100 µs, 100-9999
	count  uint64
	max    uint64 // ns
}

func newHistogram() *Histogram {
	return &Histogram{fine: make([]uint64, 10000), coarse: make([]uint64, 10000)}
}

func (h *Histogram) add(ns uint64) {
	us := ns / 1000
	switch {
	case us < 10000:
		h.fine[us]++
	case us/100 < 10000:
		h.coarse[us/100]++
	default:
		h.coarse[9999]++
	}
	h.count++
	h.max = max(h.max, ns)
}

func (h *Histogram) merge(o *Histogram) {
	for i := range h.fine {
		h.fine[i] += o.fine[i]
		h.coarse[i] += o.coarse[i]
	}
	h.count += o.count
	h.max = max(h.max, o.max)
}

// Quantile returns the latency below which a fraction q of samples lie, in µs.
func (h *Histogram) Quantile(q float64) float64 {
	if h.count == 0 {
		return 0
	}
	want := uint64(math.Ceil(q * float64(h.count)))
	var seen uint64
	for us, n := range h.fine {
		if seen += n; seen >= want {
			return float64(us) + 0.5
		}
	}
	for c, n := range h.coarse {
		if seen += n; seen >= want {
			return float64(c*100) + 50
		}
	}
	return float64(h.max) / 1000
}

// MaxUs is the highest latency, in µs.
func (h *Histogram) MaxUs() float64 { return float64(h.max) / 1000 }

// CDF returns (latency µs, cumulative fraction) points for plotting.
func (h *Histogram) CDF() (xs, ys []float64) {
	var seen uint64
	for us, n := range h.fine {
		if n == 0 {
			continue
		}
		seen += n
		xs, ys = append(xs, float64(us)+0.5), append(ys, float64(seen)/float64(h.count))
	}
	for c, n := range h.coarse {
		if n == 0 {
			continue
		}
		seen += n
		xs, ys = append(xs, float64(c*100)+50), append(ys, float64(seen)/float64(h.count))
	}
	return xs, ys
}

// Quantile is the value below which a fraction q of v lies (v unchanged).
func Quantile[T uint32 | float64](v []T, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return float64(s[min(len(s)-1, int(q*float64(len(s))))])
}
