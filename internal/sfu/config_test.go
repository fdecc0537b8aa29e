package sfu

import (
	"net/netip"
	"strings"
	"testing"
)

// A configuration that cannot work fails at start, naming the field.
func TestConfigRefusedNamingTheField(t *testing.T) {
	media := []netip.AddrPort{netip.MustParseAddrPort("10.0.0.1:40000")}
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "media"},
		{Config{Media: media, Dataplane: "ebpf"}, "dataplane"},
		{Config{Media: media, Unencrypted: true}, "iface"}, // the eBPF data plane: where?
		{Config{Media: media, Dataplane: "ebpf", Unencrypted: true, Ifaces: []string{"eth0"}, RX: "afxdp"}, "rx"},
		{Config{Media: media, RX: "dpdk"}, "rx"},
		{Config{Media: media, Ifaces: []string{"eth0"}}, "iface"}, // kernel sockets take no interfaces
		{Config{Media: media, MetricsLabels: "all"}, "metrics-labels"},
		{Config{Media: media, Workers: -1}, "workers"},
		{Config{Media: media, Workers: 65}, "workers"},
		{Config{Media: media, RX: "afxdp", Workers: 2}, "workers"},
		{Config{Media: media, Unencrypted: true, Ifaces: []string{"eth0"}, Workers: 2}, "workers"},
	} {
		err := tc.cfg.validate()
		if err == nil || !strings.HasPrefix(err.Error(), "sfu: "+tc.field+":") {
			t.Errorf("%+v: %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	for _, ok := range []Config{
		{Media: media},
		{Media: media, RX: "afxdp", Ifaces: []string{"eth0", "eth1"}}, // AF_XDP on both
		{Media: media, Unencrypted: true, Ifaces: []string{"eth0"}},
		{Media: media, Workers: 4},
	} {
		if err := ok.validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
}
