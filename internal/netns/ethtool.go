package netns

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtool commands (linux/ethtool.h) that set one value.
const (
	ethtoolSTXCSUM = 0x00000017 // TX checksum offload
	ethtoolSGRO    = 0x0000002c // generic receive offload
)

// DisableTxChecksum turns off TX checksum offload on iface in the calling
// thread's namespace (what `ethtool -K IFACE tx off` does). A veth otherwise
// hands its peer datagrams whose UDP checksum holds only the pseudo-header
// sum (CHECKSUM_PARTIAL), which no real wire carries.
func DisableTxChecksum(iface string) error {
	return ethtoolSet(iface, ethtoolSTXCSUM, 0, "tx off")
}

// EnableGRO turns on GRO on iface in the calling thread's namespace (`ethtool
// -K IFACE gro on`). On a veth it also gives receive its own NAPI instance,
// which can then run in a thread of its own (threaded NAPI).
func EnableGRO(iface string) error {
	return ethtoolSet(iface, ethtoolSGRO, 1, "gro on")
}

func ethtoolSet(iface string, cmd, data uint32, what string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	value := struct{ cmd, data uint32 }{cmd: cmd, data: data}
	var ifr [unix.IFNAMSIZ + 24]byte
	copy(ifr[:unix.IFNAMSIZ-1], iface)
	*(*uintptr)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = uintptr(unsafe.Pointer(&value))
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
		return fmt.Errorf("ethtool %s %s: %w", what, iface, errno)
	}
	return nil
}

// RXQueues is how many RX queues iface has in the calling thread's
// namespace (`ethtool -l`: RX-only plus combined channels), 1 for a driver
// that does not say. Read over ioctl, not sysfs, whose view is the
// namespace it was mounted in.
func RXQueues(iface string) (int, error) {
	const ethtoolGChannels = 0x0000003c
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	// struct ethtool_channels: cmd, max_rx, max_tx, max_other, max_combined,
	// rx_count, tx_count, other_count, combined_count.
	var ch [9]uint32
	ch[0] = ethtoolGChannels
	var ifr [unix.IFNAMSIZ + 24]byte
	copy(ifr[:unix.IFNAMSIZ-1], iface)
	*(*uintptr)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = uintptr(unsafe.Pointer(&ch[0]))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr[0])))
	switch errno {
	case 0:
	case unix.EOPNOTSUPP:
		return 1, nil
	default:
		return 0, fmt.Errorf("ethtool -l %s: %w", iface, errno)
	}
	return max(int(ch[5]+ch[8]), 1), nil
}
