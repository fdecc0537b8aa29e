package dataplane

import (
	"encoding/binary"
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// Kernel receive times. The transport-wide feedback tells a sender when
// each of its datagrams arrived, and its delay-based estimate reads a
// growing gap between send and arrival times as a queue. Stamped when
// user space reads a datagram, the times carry the process's own delays
// too (a read loop that waits for a CPU its senders' encoders share adds
// milliseconds at random); from the socket's SO_TIMESTAMPNS they are when
// the kernel took it, as the eBPF plane's program stamps its own at
// XDP or TC.

// rxTimeOOB holds one control message with a struct timespec.
const rxTimeOOB = 64

// staleRxTime: a stamp older than this when read is not believed (a step
// of the realtime clock between the stamp and the read).
const staleRxTime = time.Second

// enableRxTimes asks the kernel to stamp c's datagrams (SO_TIMESTAMPNS).
func enableRxTimes(c *net.UDPConn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1)
	}); err != nil {
		return err
	}
	return serr
}

// clockOffset is CLOCK_REALTIME less CLOCK_MONOTONIC now, and the latter:
// the stamps are on the former, the arrival logs on the latter.
func clockOffset() (offset, now time.Duration) {
	var rt unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
	now = monoNow()
	return time.Duration(rt.Nano()) - now, now
}

// rxTime is the receive time (CLOCK_MONOTONIC) a datagram's control
// messages carry, read at now with the clocks offset apart; 0 if they
// carry none or one not to believe.
func rxTime(oob []byte, offset, now time.Duration) time.Duration {
	for len(oob) >= unix.SizeofCmsghdr {
		// struct cmsghdr: its length (with itself), level and type.
		n := int(binary.NativeEndian.Uint64(oob))
		level, typ := int32(binary.NativeEndian.Uint32(oob[8:])), int32(binary.NativeEndian.Uint32(oob[12:]))
		if n < unix.SizeofCmsghdr || n > len(oob) {
			return 0
		}
		data := oob[unix.SizeofCmsghdr:n]
		if level == unix.SOL_SOCKET && typ == unix.SCM_TIMESTAMPNS && len(data) >= 16 {
			ts := time.Duration(int64(binary.NativeEndian.Uint64(data))*1e9 + int64(binary.NativeEndian.Uint64(data[8:])))
			at := ts - offset
			if at > now || now-at > staleRxTime {
				return 0
			}
			return at
		}
		oob = oob[min(cmsgSpace(n), len(oob)):]
	}
	return 0
}

// cmsgSpace is a control message's length with its alignment padding.
func cmsgSpace(n int) int { return (n + unix.SizeofPtr - 1) &^ (unix.SizeofPtr - 1) }
