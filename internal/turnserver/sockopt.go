package turnserver

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// Socket set-up steps, chained into net.ListenConfig.Control by controlWith.

// udpBuffer is what UDP sockets ask for, so bursts of media are queued rather
// than dropped while the slow path catches up (the kernel caps it at
// net.core.rmem_max / wmem_max).
const udpBuffer = 4 << 20

func setUDPBuffers(network, address string, c syscall.RawConn) error {
	return rawControl(c, func(fd int) error {
		return errors.Join(
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, udpBuffer),
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, udpBuffer))
	})
}

// setReusePort shares a port: several UDP listener sockets spread the slow
// path over the cores, and an RFC 6062 relay's connections to peers leave
// from its listener's address (Linux allows that only when every socket
// bound there sets it).
func setReusePort(network, address string, c syscall.RawConn) error {
	return rawControl(c, func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
}

type controlFunc = func(network, address string, c syscall.RawConn) error

// controlWith runs set-up steps in order; nil steps are skipped.
func controlWith(steps ...controlFunc) controlFunc {
	return func(network, address string, c syscall.RawConn) error {
		for _, step := range steps {
			if step == nil {
				continue
			}
			if err := step(network, address, c); err != nil {
				return err
			}
		}
		return nil
	}
}

func rawControl(c syscall.RawConn, fn func(fd int) error) error {
	var serr error
	err := c.Control(func(fd uintptr) { serr = fn(int(fd)) })
	return errors.Join(err, serr)
}
