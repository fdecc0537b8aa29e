package netns

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

const ethtoolSTXCSUM = 0x00000017 // ETHTOOL_STXCSUM: set TX checksum offload

// DisableTxChecksum turns off TX checksum offload on iface in the calling
// thread's namespace (what `ethtool -K IFACE tx off` does). A veth otherwise
// hands its peer datagrams whose UDP checksum holds only the pseudo-header
// sum (CHECKSUM_PARTIAL), which no real wire carries.
func DisableTxChecksum(iface string) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	value := struct{ cmd, data uint32 }{cmd: ethtoolSTXCSUM, data: 0}
	var ifr [unix.IFNAMSIZ + 24]byte
	copy(ifr[:unix.IFNAMSIZ-1], iface)
	*(*uintptr)(unsafe.Pointer(&ifr[unix.IFNAMSIZ])) = uintptr(unsafe.Pointer(&value))
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr[0]))); errno != 0 {
		return fmt.Errorf("ethtool tx off %s: %w", iface, errno)
	}
	return nil
}
