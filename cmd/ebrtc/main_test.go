package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCLI(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		code     int
		contains string
	}{
		{nil, 0, "Commands:"},
		{[]string{"--help"}, 0, "turn"},
		{[]string{"version"}, 0, "ebrtc dev"},
		{[]string{"turn", "--help"}, 0, "-relay-ip"},
		{[]string{"demo", "--help"}, 0, "-clients"},
		{[]string{"bench", "--help"}, 0, "-relays"},
		{[]string{"offload", "--help"}, 0, "-iface"},
		{[]string{"offload"}, 2, "--iface is required"},
		{[]string{"bench", "--sizes", "7"}, 2, "--sizes"},
		{[]string{"offload", "--iface", "x", "--spill", "1/1"}, 2, "spill"},
		{[]string{"offload", "--iface", "x", "--spill", "often"}, 2, "spill"},
		{[]string{"offload", "--iface", "x", "--relay-map", "203.0.113.5=fd00::5"}, 2, "relay-map"},
		{[]string{"bogus"}, 2, "unknown command"},
		{[]string{"turn"}, 2, "config: user"},
		{[]string{"turn", "--user", "a:b", "--offload", "ebpf"}, 2, "config: offload"},
		{[]string{"turn", "--user", "a:b", "--log-format", "xml"}, 2, "config: log-format"},
		{[]string{"offload", "--iface", "x", "--log-format", "xml"}, 2, "log format"},
		{[]string{"sfu", "--unencrypted-media", "--media", "10.0.0.1:4000", "--log-level", "loud"}, 2, "log level"},
		{[]string{"bench", "--afxdp", "--rate", "5"}, 2, "--rate"},
		{[]string{"rx-probe", "--rx", "dpdk", "--listen", "127.0.0.1:0"}, 1, "rx"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.contains) {
			t.Errorf("ebrtc %v: exit %d, output %q; want exit %d containing %q", tc.args, code, out.String()+errOut.String(), tc.code, tc.contains)
		}
	}
}
