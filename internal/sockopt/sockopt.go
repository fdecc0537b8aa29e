// Package sockopt has the socket set-up steps the relays' sockets share,
// each a net.ListenConfig Control function, chained by ControlWith.
package sockopt

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// UDPBuffer is what UDP sockets ask for, so bursts of media are queued
// rather than dropped while the slow path catches up (the kernel caps it
// at net.core.rmem_max / wmem_max).
const UDPBuffer = 4 << 20

// UDPBuffers asks for UDPBuffer bytes of receive and send buffer.
func UDPBuffers(network, address string, c syscall.RawConn) error {
	return Raw(c, func(fd int) error {
		return errors.Join(
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, UDPBuffer),
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, UDPBuffer))
	})
}

// ReusePort shares a port: several sockets spread a listener's datagrams
// over the cores (the kernel picks one by a hash of the addresses), and
// connections may leave from a listener's address (Linux allows either
// only when every socket bound there sets it).
func ReusePort(network, address string, c syscall.RawConn) error {
	return Raw(c, func(fd int) error { return unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
}

// Control is a net.ListenConfig Control function.
type Control = func(network, address string, c syscall.RawConn) error

// ControlWith runs set-up steps in order; nil steps are skipped.
func ControlWith(steps ...Control) Control {
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

// Raw runs fn on the socket's descriptor.
func Raw(c syscall.RawConn, fn func(fd int) error) error {
	var serr error
	err := c.Control(func(fd uintptr) { serr = fn(int(fd)) })
	return errors.Join(err, serr)
}
