package turnserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func noEnv(string) string { return "" }

func TestConfigLayers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "turn.yaml")
	yaml := "user: [a:1, b:2]\nrealm: from-yaml\nrelay-ip: [192.0.2.10]\nmin-port: 50000\nlisten: [\"udp://192.0.2.10:3478\"]\n"
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"EBRTC_REALM": "from-env", "EBRTC_DENY_PEER": "198.51.100.0/24, 203.0.113.7"}
	s, err := Load([]string{"--config", path, "--user", "c:3", "--max-port", "50100"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if s.Realm != "from-env" {
		t.Errorf("realm %q: environment must override YAML", s.Realm)
	}
	if len(s.Users) != 1 || s.Users["c"] != "3" {
		t.Errorf("users %v: a flag list must replace the YAML list", s.Users)
	}
	if s.MinPort != 50000 || s.MaxPort != 50100 {
		t.Errorf("ports %d-%d", s.MinPort, s.MaxPort)
	}
	if len(s.DenyPeers) != 2 {
		t.Errorf("deny-peer from env: %v", s.DenyPeers)
	}
	if s.ChannelLifetime != 10*time.Minute || s.PermissionLifetime != 5*time.Minute {
		t.Errorf("lifetimes %v %v", s.ChannelLifetime, s.PermissionLifetime)
	}
}

// Every bad value fails at start with a message naming its key.
func TestConfigErrorsNameTheKey(t *testing.T) {
	base := []string{"--user", "a:b"}
	cases := map[string][]string{
		"listen":              {"--listen", "udp://nonsense"},
		"udp-threads":         {"--udp-threads", "0"},
		"user":                {"--user", "nopassword"},
		"relay-ip":            {"--relay-ip", "300.1.2.3"},
		"external-ip":         {"--external-ip", "2001:db8::1"},
		"min-port":            {"--min-port", "70000"},
		"offload":             {"--offload", "ebpf"},
		"offload-forwarding":  {"--offload-forwarding", "sometimes"},
		"rx":                  {"--rx", "afxdp"}, // with the fast path on
		"metrics-listen":      {"--metrics-listen", "localhost"},
		"allow-peer":          {"--allow-peer", "10.0.0.0/33"},
		"deny-peer":           {"--deny-peer", "x"},
		"log-level":           {"--log-level", "loud"},
		"log-format":          {"--log-format", "xml"},
		"channel-lifetime":    {"--channel-lifetime", "2h"},
		"permission-lifetime": {"--permission-lifetime", "0s"},
		"user-quota":          {"--user-quota", "-1"},
		"tls-cert":            {"--listen", "tls://192.0.2.1:5349"},
	}
	for key, args := range cases {
		_, err := Load(append(append([]string{}, base...), args...), noEnv)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v does not name the key", key, err)
		}
	}
	if _, err := Load(nil, noEnv); err == nil || !strings.Contains(err.Error(), "user") {
		t.Errorf("no credentials: %v (an open relay must be refused)", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	_ = os.WriteFile(path, []byte("user: [a:b]\nrelay-ipp: [192.0.2.1]\n"), 0o600)
	if _, err := Load([]string{"--config", path}, noEnv); err == nil || !strings.Contains(err.Error(), "relay-ipp") {
		t.Errorf("unknown YAML key: %v", err)
	}
}

func TestListenerInRelayRangeRefused(t *testing.T) {
	_, err := Load([]string{"--user", "a:b", "--listen", "udp://192.0.2.1:50000"}, noEnv)
	if err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("listener inside the relay range: %v", err)
	}
}
