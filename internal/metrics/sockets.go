package metrics

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

var socketDropsDesc = prometheus.NewDesc("ebrtc_turn_socket_drops_total",
	"Datagrams the kernel dropped at the server's UDP sockets (receive buffer full: user space too slow), by socket kind.",
	[]string{"socket"}, nil)

// SocketDropsCollector sums the kernel's per-socket drop counters
// (/proc/net/udp and udp6, the drops column) of this process's sockets
// (by inode: other processes may use ports of the relay range), told apart
// by local port: what is lost before user space sees it.
type SocketDropsCollector struct {
	kind func(port uint16) string // "" for sockets that are not ours
}

// NewSocketDropsCollector classifies sockets with kind.
func NewSocketDropsCollector(kind func(port uint16) string) *SocketDropsCollector {
	return &SocketDropsCollector{kind: kind}
}

func (c *SocketDropsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- socketDropsDesc }

func (c *SocketDropsCollector) Collect(ch chan<- prometheus.Metric) {
	ours, err := socketInodes()
	if err != nil {
		ch <- prometheus.NewInvalidMetric(socketDropsDesc, err)
		return
	}
	drops := map[string]uint64{}
	for _, path := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		if err := c.add(path, ours, drops); err != nil {
			ch <- prometheus.NewInvalidMetric(socketDropsDesc, err)
			return
		}
	}
	for kind, n := range drops {
		ch <- prometheus.MustNewConstMetric(socketDropsDesc, prometheus.CounterValue, float64(n), kind)
	}
}

// socketInodes are the inodes of this process's sockets.
func socketInodes() (map[string]bool, error) {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(fds))
	for _, fd := range fds {
		link, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err == nil && strings.HasPrefix(link, "socket:[") {
			out[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
		}
	}
	return out, nil
}

func (c *SocketDropsCollector) add(path string, ours map[string]bool, drops map[string]uint64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 13 || !ours[fields[9]] {
			continue
		}
		local := fields[1]
		i := strings.LastIndexByte(local, ':')
		port, err := strconv.ParseUint(local[i+1:], 16, 16)
		if err != nil {
			continue
		}
		kind := c.kind(uint16(port))
		if kind == "" {
			continue
		}
		n, err := strconv.ParseUint(fields[len(fields)-1], 10, 64)
		if err == nil {
			drops[kind] += n
		}
	}
	return sc.Err()
}
