package main

import (
	"bytes"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/snoop"
)

// FuzzParseSpill: --spill of `ebrtc offload` is "off", "1/N" with N >= 2,
// or a duration of at least 1ms; anything else is an error naming the
// value; an accepted value sets exactly what it says and nothing else.
func FuzzParseSpill(f *testing.F) {
	for _, s := range []string{"off", "1/1000", "1/2", "1/1", "1/0", "1/", "1/4294967296", "1s", "1ms", "999us", "250ms", "-1s", "2/3", "", "1/1ms", "1h2m"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		var cfg snoop.Config
		err := parseSpill(v, &cfg)
		if err != nil {
			if cfg.SpillEvery != 0 || cfg.SpillInterval != 0 {
				t.Fatalf("%q refused (%v) but set every %d interval %v", v, err, cfg.SpillEvery, cfg.SpillInterval)
			}
			if !strings.Contains(err.Error(), strconv.Quote(v)) {
				t.Fatalf("error %q does not name the value %q", err, v)
			}
			return
		}
		switch {
		case v == "off":
			if cfg.SpillEvery != 0 || cfg.SpillInterval != 0 {
				t.Fatalf("off set every %d interval %v", cfg.SpillEvery, cfg.SpillInterval)
			}
		case strings.HasPrefix(v, "1/"):
			n, err := strconv.ParseUint(v[2:], 10, 32)
			if err != nil || n < 2 || cfg.SpillEvery != uint32(n) || cfg.SpillInterval != 0 {
				t.Fatalf("%q accepted as every %d interval %v", v, cfg.SpillEvery, cfg.SpillInterval)
			}
		default:
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Millisecond || cfg.SpillInterval != d || cfg.SpillEvery != 0 {
				t.Fatalf("%q accepted as every %d interval %v", v, cfg.SpillEvery, cfg.SpillInterval)
			}
		}
	})
}

// FuzzOffloadFlags runs `ebrtc offload` with fuzzed --listen-port,
// --relay-ip, --relay-map, --min-port and --max-port, and a --spill that is
// always refused, so that it never starts (no BPF, no root needed). It
// never panics, exits 2, and its message names the first bad flag in the
// order the command checks them, or spill when all of them are good.
func FuzzOffloadFlags(f *testing.F) {
	f.Add("3478", "192.0.2.1", "198.51.100.1=10.0.0.1", "49152", "65535")
	f.Add("0", "192.0.2.1", "", "1", "1")
	f.Add("3478", "2001:db8::1", "2001:db8::5=fd00::5", "1", "65535")
	f.Add("65536", "x", "a=b", "0", "70000")
	f.Add("3478", "::ffff:192.0.2.1", "::ffff:198.51.100.1=10.0.0.1", "0x10", "0x20")
	f.Add("3478", "192.0.2.1", "198.51.100.1", "50000", "40000")
	f.Fuzz(func(t *testing.T, port, relayIP, relayMap, minPort, maxPort string) {
		args := []string{"--iface", "lo", "--listen-port", port, "--relay-ip", relayIP, "--min-port", minPort, "--max-port", maxPort}
		if relayMap != "" {
			args = append(args, "--relay-map", relayMap)
		}
		args = append(args, "--spill", "never", "--pin-dir", "", "--control-socket", "")
		var stdout, stderr bytes.Buffer
		code := runOffload(args, &stdout, &stderr)
		msg := stderr.String()
		if code != 2 {
			t.Fatalf("%q: exit %d (%s)", args, code, msg)
		}
		// The checks, in the command's order.
		want := "spill"
		minN, minErr := strconv.ParseInt(minPort, 0, strconv.IntSize)
		maxN, maxErr := strconv.ParseInt(maxPort, 0, strconv.IntSize)
		if minErr != nil || maxErr != nil {
			want = "invalid value" // the flag package
		} else if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			want = "listen-port"
		} else if _, err := netip.ParseAddr(relayIP); err != nil {
			want = "relay-ip"
		} else if ext, wire, ok := strings.Cut(relayMap, "="); relayMap != "" && !validRelayMap(ext, wire, ok) {
			want = "relay-map"
		} else if minN < 1 || maxN > 65535 || minN > maxN {
			want = "min-port"
		}
		if !strings.Contains(msg, want) {
			t.Fatalf("%q: message %q does not name %s", args, msg, want)
		}
		if want != "invalid value" && !strings.HasPrefix(msg, "ebrtc offload: "+want+": ") {
			t.Fatalf("%q: message %q does not start with \"ebrtc offload: %s: \"", args, msg, want)
		}
	})
}

func validRelayMap(ext, wire string, ok bool) bool {
	a, err1 := netip.ParseAddr(ext)
	b, err2 := netip.ParseAddr(wire)
	return ok && err1 == nil && err2 == nil && a.Is4() == b.Is4()
}
