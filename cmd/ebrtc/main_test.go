package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/access"
)

const testSecret = "0123456789abcdef0123456789abcdef"

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
		{[]string{"sfu", "--media", "127.0.0.1:40999", "--http"}, 1, "token-secret: rooms need join tokens"},
		{[]string{"sfu", "--media", "127.0.0.1:40999", "--http", "--token-secret", "short"}, 1, "token-secret: 5 bytes"},
		{[]string{"sfu", "--media", "127.0.0.1:40999", "--token-secret", "x", "--token-secret-file", "f"}, 2, "not both"},
		{[]string{"sfu", "--media", "127.0.0.1:40999", "--open-rooms", "--max-participants", "0"}, 2, "max-participants"},
		{[]string{"sfu", "--media", "127.0.0.1:40999", "--open-rooms", "--http", "--allowed-origin", "[bad"}, 1, "allowed-origin"},
		{[]string{"sfu", "--media", "127.0.0.1:40999", "--open-rooms", "--turn-url", "turn:192.0.2.1:3478?transport=tcp"}, 2, "turn-secret-file"},
		{[]string{"sfu", "--media", "127.0.0.1:40999", "--open-rooms", "--http", "--turn-secret", "s", "--turn-url", "http://192.0.2.1"}, 1, "turn-url"},
		{[]string{"sfu", "--media", "127.0.0.1:40999", "--open-rooms", "--http", "--turn-secret", "s", "--turn-url", "turn:192.0.2.1", "--turn-ttl", "1s"}, 1, "turn-ttl"},
		{[]string{"sfu", "--media", "127.0.0.1:40999", "--open-rooms", "--http", "--last-n", "2", "--no-rate-adaptation"}, 1, "last-n"},
		{[]string{"sfu", "token", "--room", "r", "--identity", "a"}, 2, "token-secret-file"},
		{[]string{"sfu", "token", "--token-secret", testSecret, "--room", "a room", "--identity", "a"}, 2, "room"},
		{[]string{"sfu", "token", "--token-secret", testSecret, "--room", "r"}, 2, "identity"},
		{[]string{"sfu", "token", "--token-secret", testSecret, "--room", "r", "--identity", "a", "--ttl", "48h"}, 2, "ttl"},
		{[]string{"rx-probe", "--rx", "dpdk", "--listen", "127.0.0.1:0"}, 1, "rx"},
	} {
		var out, errOut bytes.Buffer
		code := run(tc.args, &out, &errOut)
		if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.contains) {
			t.Errorf("ebrtc %v: exit %d, output %q; want exit %d containing %q", tc.args, code, out.String()+errOut.String(), tc.code, tc.contains)
		}
	}
}

// ebrtc sfu token mints what the SFU's gate admits: the grant asked for,
// from a secret file (its newline dropped), as a page address if asked.
func TestSFUToken(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	args := []string{"sfu", "token", "--token-secret-file", file, "--room", "standup", "--identity", "ann", "--name", "Ann", "--viewer", "--ttl", "5m", "--url", "https://meet.test:8088/"}
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	page, token, ok := strings.Cut(strings.TrimSpace(out.String()), "?token=")
	if !ok || page != "https://meet.test:8088/" {
		t.Fatalf("printed %q", out.String())
	}
	gate, err := access.New(access.Config{Secret: []byte(testSecret)})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := gate.Join(token, "", time.Now())
	if err != nil || adm.Grant != (access.Grant{Room: "standup", Identity: "ann", Name: "Ann"}) {
		t.Errorf("the gate reads %+v, %v", adm.Grant, err)
	}
	if _, err := gate.Join(adm.Rejoin, "", time.Now().Add(6*time.Minute)); err == nil {
		t.Error("joined after its ttl")
	}
}
