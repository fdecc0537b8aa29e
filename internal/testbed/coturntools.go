package testbed

import (
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strconv"
	"time"
)

// StartTurnutilsPeer runs coturn's turnutils_peer, which echoes every
// datagram, on the peer's address, port 3480.
func (tb *Testbed) StartTurnutilsPeer() (*Process, error) {
	bin, err := exec.LookPath("turnutils_peer")
	if err != nil {
		return nil, err
	}
	p, err := Start(tb.Peer, io.Discard, bin, "-L", PeerIP4.String(), "-p", "3480")
	if err == nil {
		time.Sleep(200 * time.Millisecond) // bound before the first datagram
	}
	return p, err
}

var uclientLostRE = regexp.MustCompile(`Total lost packets (\d+) \(`)

// RunTurnutilsUclient runs coturn's turnutils_uclient from the client ns
// against the TURN server at 10.201.1.1:3478: clients allocations, each with
// channels to turnutils_peer (ports 3480 and 3481) carrying messages each.
// It returns the packets it reports lost, and its output.
func (tb *Testbed) RunTurnutilsUclient(user, password string, clients, messages int) (int, []byte, error) {
	bin, err := exec.LookPath("turnutils_uclient")
	if err != nil {
		return 0, nil, err
	}
	out, err := tb.Client.Command("timeout", "90", bin, "-u", user, "-w", password,
		"-e", PeerIP4.String(), "-r", "3480", "-n", strconv.Itoa(messages), "-m", strconv.Itoa(clients),
		"-l", "170", "-z", "5", "-X", "-c", "-L", ClientIP4.String(), ServerClientIP4.String()).CombinedOutput()
	if err != nil {
		return 0, out, fmt.Errorf("turnutils_uclient: %w", err)
	}
	m := uclientLostRE.FindSubmatch(out)
	if m == nil {
		return 0, out, fmt.Errorf("turnutils_uclient printed no loss line")
	}
	lost, _ := strconv.Atoi(string(m[1]))
	return lost, out, nil
}
