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

// UclientMode is how turnutils_uclient allocates and where it sends.
type UclientMode int

const (
	// UclientChannels: one plain allocation per client (-c), channels to
	// turnutils_peer.
	UclientChannels UclientMode = iota
	// UclientRTPPairs: uclient's default, an RTP/RTCP pair of allocations
	// per client (EVEN-PORT with R=1, then RESERVATION-TOKEN; RFC 8656
	// section 7.2), channels to turnutils_peer.
	UclientRTPPairs
	// UclientHairpin: clients talk to each other's relay addresses (-y).
	UclientHairpin
)

var uclientLostRE = regexp.MustCompile(`Total lost packets (\d+) \(`)

// RunTurnutilsUclient runs coturn's turnutils_uclient from the client ns
// against the TURN server at 10.201.1.1:3478: clients allocations (pairs in
// UclientRTPPairs), each with channels carrying messages each. It returns
// the packets it reports lost, and its output.
func (tb *Testbed) RunTurnutilsUclient(user, password string, clients, messages int, mode UclientMode) (int, []byte, error) {
	bin, err := exec.LookPath("turnutils_uclient")
	if err != nil {
		return 0, nil, err
	}
	args := []string{"90", bin, "-u", user, "-w", password,
		"-e", PeerIP4.String(), "-r", "3480", "-n", strconv.Itoa(messages), "-m", strconv.Itoa(clients),
		"-l", "170", "-z", "5", "-X", "-L", ClientIP4.String()}
	switch mode {
	case UclientChannels:
		args = append(args, "-c")
	case UclientHairpin:
		args = append(args, "-c", "-y")
	}
	out, err := tb.Client.Command("timeout", append(args, ServerClientIP4.String())...).CombinedOutput()
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
