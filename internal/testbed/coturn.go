package testbed

import (
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// StartCoturn runs Debian's coturn turnserver in the server ns, listening
// where `ebrtc turn` would (10.201.1.1:3478), relaying on 10.201.2.1, with one
// long-term user, one relay thread per CPU and every non-UDP listener off.
// It returns once the server answers an allocation. extra are more
// turnserver.conf lines.
func (tb *Testbed) StartCoturn(workDir string, out io.Writer, user, password string, extra ...string) (*Process, error) {
	conf := strings.Join([]string{
		"listening-ip=" + ServerClientIP4.String(), "listening-port=3478",
		"relay-ip=" + ServerPeerIP4.String(), "min-port=49152", "max-port=65535",
		"lt-cred-mech", "user=" + user + ":" + password, "realm=ebrtc.test",
		"relay-threads=" + strconv.Itoa(runtime.NumCPU()),
		"no-tcp", "no-tls", "no-dtls", "no-tcp-relay", "no-cli", "no-rfc5780", "no-stun-backward-compatibility",
		"log-file=/dev/null", "no-stdout-log",
		"pidfile=" + filepath.Join(workDir, "turnserver.pid"),
		"userdb=" + filepath.Join(workDir, "turndb"),
	}, "\n") + "\n" + strings.Join(extra, "\n") + "\n"
	path := filepath.Join(workDir, "turnserver.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	p, err := Start(tb.Server, out, "turnserver", "-c", path)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if exited, err := p.Exited(); exited {
			return nil, fmt.Errorf("turnserver exited: %v", err)
		}
		if tb.probeTURN(user, password) == nil {
			return p, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = p.Stop(5 * time.Second)
	return nil, fmt.Errorf("turnserver not answering after 10s")
}

// probeTURN allocates and releases once from the client ns.
func (tb *Testbed) probeTURN(user, password string) error {
	conn, err := ListenUDP(tb.Client, netip.AddrPortFrom(ClientIP4, 0))
	if err != nil {
		return err
	}
	defer conn.Close()
	c, err := turnclient.Allocate(conn, netip.AddrPortFrom(ServerClientIP4, 3478), user, password, false)
	if err != nil {
		return err
	}
	return c.Release()
}
