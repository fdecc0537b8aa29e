package handover

import (
	"net"
	"os"
)

// Notify tells systemd (Type=notify) about the service: "READY=1",
// "RELOADING=1", and after an upgrade "MAINPID=<pid>", without which
// systemd would take the predecessor's exit for the service's end
// (the unit needs NotifyAccess=all for a successor's message). Without
// NOTIFY_SOCKET it does nothing.
func Notify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' {
		path = "\x00" + path[1:] // abstract namespace
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer conn.Close()
	_, err = conn.Write([]byte(state))
	return err
}
