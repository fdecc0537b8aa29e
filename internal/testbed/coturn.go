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

	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/turnclient"
)

// StartCoturn runs Debian's coturn turnserver in the server ns, listening
// where `ebrtc turn` would (10.201.1.1:3478), relaying on 10.201.2.1, with one
// long-term user, one relay thread per CPU and every non-UDP listener off.
// It returns once the server answers an allocation. extra are more
// turnserver.conf lines.
func (tb *Testbed) StartCoturn(workDir string, out io.Writer, user, password string, extra ...string) (*Process, error) {
	auth := []string{"lt-cred-mech", "user=" + user + ":" + password}
	return tb.startCoturn(workDir, out, append(auth, extra...), user, password)
}

// StartCoturnREST is StartCoturn with TURN REST API credentials (a shared
// secret) instead of a user.
func (tb *Testbed) StartCoturnREST(workDir string, out io.Writer, secret string) (*Process, error) {
	user, password, err := turn.GenerateLongTermTURNRESTCredentials(secret, "probe", time.Hour)
	if err != nil {
		return nil, err
	}
	return tb.startCoturn(workDir, out, []string{"use-auth-secret", "static-auth-secret=" + secret}, user, password)
}

func (tb *Testbed) startCoturn(workDir string, out io.Writer, extra []string, probeUser, probePassword string) (*Process, error) {
	conf := strings.Join(append([]string{
		"listening-ip=" + ServerClientIP4.String(), "listening-port=3478",
		"relay-ip=" + ServerPeerIP4.String(), "min-port=49152", "max-port=65535",
		"realm=ebrtc.test",
		"relay-threads=" + strconv.Itoa(runtime.NumCPU()),
		"no-tcp", "no-tls", "no-dtls", "no-tcp-relay", "no-cli", "no-rfc5780", "no-stun-backward-compatibility",
		"log-file=/dev/null", "no-stdout-log",
		"pidfile=" + filepath.Join(workDir, "turnserver.pid"),
		"userdb=" + filepath.Join(workDir, "turndb"),
	}, extra...), "\n") + "\n"
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
		if tb.ProbeTURN(probeUser, probePassword) == nil {
			return p, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = p.Stop(5 * time.Second)
	return nil, fmt.Errorf("turnserver not answering after 10s")
}

// ProbeTURN allocates and releases once from the client ns: is a TURN
// server answering at 10.201.1.1:3478?
func (tb *Testbed) ProbeTURN(user, password string) error {
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
