package testbed

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/ebrtc/ebrtc/internal/netns"
)

// XDPMapEntries counts the entries of every hash map of the XDP program
// attached to iface in ns, by map name as the kernel keeps it (15 bytes:
// client_routes_v4 and _v6 add up under "client_routes_v"): what a relay
// process holds in the kernel, read without asking the process.
func XDPMapEntries(ns *netns.NS, iface string) (map[string]int, error) {
	out, err := ns.Output("ip", "-j", "link", "show", "dev", iface)
	if err != nil {
		return nil, err
	}
	var links []struct {
		XDP struct {
			Prog struct {
				ID uint32 `json:"id"`
			} `json:"prog"`
		} `json:"xdp"`
	}
	if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
		return nil, fmt.Errorf("ip link show %s: %v", iface, err)
	}
	id := links[0].XDP.Prog.ID
	if id == 0 {
		return nil, errors.New("no XDP program on " + iface)
	}
	prog, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return nil, err
	}
	defer prog.Close()
	info, err := prog.Info()
	if err != nil {
		return nil, err
	}
	ids, _ := info.MapIDs()
	counts := map[string]int{}
	for _, mid := range ids {
		if err := countMap(mid, counts); err != nil {
			return nil, err
		}
	}
	return counts, nil
}

func countMap(id ebpf.MapID, counts map[string]int) error {
	m, err := ebpf.NewMapFromID(id)
	if err != nil {
		return err
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil || info.Type != ebpf.Hash {
		return err
	}
	var key, value []byte
	n := 0
	for it := m.Iterate(); it.Next(&key, &value); {
		n++
	}
	counts[info.Name] += n
	return nil
}
