package afxdp

import (
	"bufio"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testbed"
)

// TestRestart kills a process that has the classifier attached (SIGKILL:
// no cleanup runs) and starts again: the kernel detaches the program with
// the process's last link reference, so the new process attaches and
// receives through AF_XDP as the first did.
func TestRestart(t *testing.T) {
	tb := newBed(t, testbed.Options{})
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "AFXDP_HELPER_NS="+tb.Server.Name)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "listening ") {
				ready <- strings.TrimPrefix(s.Text(), "listening ")
			}
		}
		close(ready)
	}()
	select {
	case addr, ok := <-ready:
		if !ok {
			t.Fatal("helper exited before listening")
		}
		t.Logf("helper pid %d listens on %s", cmd.Process.Pid, addr)
	case <-time.After(20 * time.Second):
		t.Fatal("helper not listening after 20 s")
	}
	if !xdpAttached(t, tb.Server) {
		t.Fatal("no XDP program while the helper listens")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for xdpAttached(t, tb.Server) {
		if time.Now().After(deadline) {
			t.Fatal("XDP program still attached 5 s after its process was killed")
		}
		time.Sleep(50 * time.Millisecond)
	}
	c := listenIn(t, tb.Server, ListenConfig{}, "udp4", testbed.ServerClientIP4.String()+":0")
	sendN(t, tb.Client, netip.AddrPortFrom(testbed.ClientIP4, 0), c.LocalAddr().(*net.UDPAddr).AddrPort(), 100, 500)
	receiveN(t, c, 100, 500)
	requireViaXDP(t, c, 100) // after the restart
}

func xdpAttached(t *testing.T, ns *netns.NS) bool {
	t.Helper()
	out, err := ns.Output("ip", "-d", "link", "show", testbed.ServerCliIface)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(out, "prog/xdp")
}

// TestMain runs TestRestart's other process when asked: it listens in the
// namespace it is given and waits to be killed.
func TestMain(m *testing.M) {
	if name := os.Getenv("AFXDP_HELPER_NS"); name != "" {
		helperListen(name)
		return
	}
	os.Exit(m.Run())
}

func helperListen(name string) {
	var c *Conn
	err := (&netns.NS{Name: name}).Do(func() (err error) {
		c, err = Listen("udp4", testbed.ServerClientIP4.String()+":0")
		return err
	})
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		os.Exit(1)
	}
	os.Stdout.WriteString("listening " + c.LocalAddr().String() + "\n")
	time.Sleep(time.Minute)
	os.Exit(1)
}
