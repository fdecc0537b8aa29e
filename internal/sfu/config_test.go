package sfu

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/turnrest"
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
		{Config{Media: media, PublisherStartKbps: 50}, "publisher-start-kbps"},
		{Config{Media: media, PublisherStartKbps: -1}, "publisher-start-kbps"},
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
		{Media: media, PublisherStartKbps: 800},
	} {
		if err := ok.validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	if c := (Config{Media: media}); c.validate() != nil || c.PublisherStartKbps != 0 {
		t.Errorf("publisher-start-kbps by default %d, want 0 (the browser's own)", c.PublisherStartKbps)
	}
}

// The TURN servers a participant is handed: the URLs, a username of its
// own expiring after the TTL (12 h by default), and the password ebrtc
// turn derives from the shared secret for that username.
func TestTURNCredentials(t *testing.T) {
	tc := TURN{URLs: []string{"turn:192.0.2.1:3478?transport=tcp"}, Secret: []byte("s3cret")}
	if err := tc.validate(); err != nil || tc.TTL != 12*time.Hour {
		t.Fatalf("validate: %v, ttl %v", err, tc.TTL)
	}
	now := time.Unix(1_800_000_000, 0)
	got := tc.servers("ann", now)
	if len(got) != 1 || !slices.Equal(got[0].URLs, tc.URLs) {
		t.Fatalf("servers %+v", got)
	}
	expiry, user, ok := turnrest.Parse(got[0].Username)
	if !ok || user != "ann" || !expiry.Equal(now.Add(12*time.Hour)) || got[0].Credential != turnrest.Password("s3cret", got[0].Username) {
		t.Errorf("credential %+v: expiry %v, user %q", got[0], expiry, user)
	}
	if (TURN{}).servers("ann", now) != nil {
		t.Error("servers handed without URLs")
	}
	for _, bad := range []TURN{{URLs: []string{"turn:x"}}, {URLs: []string{"stun:x"}, Secret: []byte("s")}, {URLs: []string{"turn:x"}, Secret: []byte("s"), TTL: time.Second}} {
		if bad.validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
