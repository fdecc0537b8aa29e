package turnserver

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ebrtc/ebrtc/internal/admin"
)

// metricsLabelChoices are the values of metrics-labels.
var metricsLabelChoices = []string{"none", "user", "allocation"}

// validateOperations checks the keys for restarts, the admin endpoint and
// per-user metrics.
func validateOperations(c Config) error {
	bad := func(key, format string, args ...any) error {
		return fmt.Errorf("config: %s: %s", key, fmt.Sprintf(format, args...))
	}
	if !filepath.IsAbs(c.PinDir) {
		return bad("pin-dir", "%q is not an absolute path (on bpffs)", c.PinDir)
	}
	if c.KeepOffload && (c.Offload == "off" || c.RX == "afxdp") {
		return bad("keep-offload", "needs the fast path (offload not off, rx kernel): it keeps the fast path relaying")
	}
	if !filepath.IsAbs(c.StateFile) || strings.HasSuffix(c.StateFile, "/") {
		return bad("state-file", "%q is not an absolute file name", c.StateFile)
	}
	if c.AdminListen != "" {
		if _, err := admin.ParseAddress(c.AdminListen); err != nil {
			return bad("admin-listen", "%v", err)
		}
	}
	if !slices.Contains(metricsLabelChoices, c.MetricsLabels) {
		return bad("metrics-labels", "%q is not none, user or allocation", c.MetricsLabels)
	}
	return nil
}
