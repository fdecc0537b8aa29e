package xsk

import (
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one of the four single-producer single-consumer rings the kernel
// shares with a socket: fill and TX (user space produces), RX and
// completion (user space consumes). The producer and consumer indexes run
// freely and wrap; an index masked by size-1 is a slot. Each side keeps a
// cached copy of the other side's index and reads the real one (an atomic
// load: the acquire that makes the entries visible) only when the cache
// says the ring is full or empty; its own index is published with an atomic
// store (the release) after the entries are written or read.
type ring struct {
	mem        []byte
	producer   *uint32
	consumer   *uint32
	flags      *uint32
	entries    unsafe.Pointer
	mask       uint32
	size       uint32
	cachedProd uint32
	cachedCons uint32
}

// mapRing maps a ring of size entries of entrySize bytes at the kernel's
// page offset pgoff, laid out as off says.
func mapRing(fd int, off unix.XDPRingOffset, size uint32, entrySize uintptr, pgoff int64) (*ring, error) {
	length := int(off.Desc) + int(size)*int(entrySize)
	mem, err := unix.Mmap(fd, pgoff, length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return nil, err
	}
	base := unsafe.Pointer(&mem[0])
	r := &ring{
		mem:      mem,
		producer: (*uint32)(unsafe.Add(base, off.Producer)),
		consumer: (*uint32)(unsafe.Add(base, off.Consumer)),
		flags:    (*uint32)(unsafe.Add(base, off.Flags)),
		entries:  unsafe.Add(base, off.Desc),
		mask:     size - 1,
		size:     size,
	}
	r.cachedProd = atomic.LoadUint32(r.producer)
	r.cachedCons = atomic.LoadUint32(r.consumer)
	return r, nil
}

func (r *ring) unmap() error {
	if r == nil || r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return err
}

// free is how many entries a producer may write, at most want.
func (r *ring) free(want uint32) uint32 {
	n := r.size - (r.cachedProd - r.cachedCons)
	if n < want {
		r.cachedCons = atomic.LoadUint32(r.consumer)
		n = r.size - (r.cachedProd - r.cachedCons)
	}
	return min(n, want)
}

// avail is how many entries a consumer may read, at most want.
func (r *ring) avail(want uint32) uint32 {
	n := r.cachedProd - r.cachedCons
	if n < want {
		r.cachedProd = atomic.LoadUint32(r.producer)
		n = r.cachedProd - r.cachedCons
	}
	return min(n, want)
}

func (r *ring) addr(i uint32) *uint64 {
	return (*uint64)(unsafe.Add(r.entries, uintptr(i&r.mask)*8))
}

func (r *ring) desc(i uint32) *unix.XDPDesc {
	return (*unix.XDPDesc)(unsafe.Add(r.entries, uintptr(i&r.mask)*unsafe.Sizeof(unix.XDPDesc{})))
}

// submit publishes n entries written after the producer index.
func (r *ring) submit(n uint32) {
	r.cachedProd += n
	atomic.StoreUint32(r.producer, r.cachedProd)
}

// release hands n read entries back to the producer.
func (r *ring) release(n uint32) {
	r.cachedCons += n
	atomic.StoreUint32(r.consumer, r.cachedCons)
}

// needsWakeup says the kernel asks for a syscall to go on (XDP_USE_NEED_WAKEUP).
func (r *ring) needsWakeup() bool {
	return atomic.LoadUint32(r.flags)&unix.XDP_RING_NEED_WAKEUP != 0
}
