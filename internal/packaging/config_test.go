package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ebrtc/ebrtc/internal/turnserver"
)

// isTurnSetting reports whether name (a flag, YAML key) is one of `ebrtc turn`'s.
func isTurnSetting(name string) bool { return turnserver.FlagSet().Lookup(name) != nil }

// The shipped configurations load as `ebrtc turn` loads them (unknown keys
// are errors), with the secret and per-node values from the environment as
// the unit and the manifest provide them; neither file holds the secret.
func TestShippedConfigsLoad(t *testing.T) {
	m := readManifest(t)
	dir := t.TempDir()
	k8sConfig := filepath.Join(dir, "turn.yaml")
	if err := os.WriteFile(k8sConfig, []byte(at(t, m.object(t, "ConfigMap"), "data", "turn.yaml").(string)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, path string
		env        map[string]string
	}{
		{"systemd", unitConfig, map[string]string{"EBRTC_AUTH_SECRET": restSecret}},
		{"kubernetes", k8sConfig, map[string]string{"EBRTC_AUTH_SECRET": restSecret,
			"EBRTC_RELAY_IP": "192.0.2.1", "EBRTC_METRICS_LISTEN": "192.0.2.1:9641"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := os.ReadFile(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.Lines(string(b)) {
				if strings.HasPrefix(strings.TrimSpace(line), "auth-secret:") || strings.HasPrefix(strings.TrimSpace(line), "user:") {
					t.Errorf("%s holds a credential: %q", tc.path, line)
				}
			}
			s, err := turnserver.Load([]string{"--config", tc.path}, func(k string) string { return tc.env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if s.AuthSecret != restSecret || len(s.RelayIPs) == 0 || s.MetricsListen == "" || s.Offload != "auto" {
				t.Errorf("loaded %+v", s.Config)
			}
			if _, err := turnserver.Load([]string{"--config", tc.path}, func(string) string { return "" }); err == nil {
				t.Error("loads without a secret (an open relay)")
			}
		})
	}
}
