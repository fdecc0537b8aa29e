package testbed

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ebrtc/ebrtc/internal/netns"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// BrowserScript is one of the node scripts in internal/testbed/browser
// (relay_call.mjs, meeting.mjs, participants.mjs) run in a namespace:
// the one launcher of every browser test, Chromium's (playwright-core)
// and Firefox ESR's (puppeteer-core over WebDriver BiDi).
type BrowserScript struct {
	NS     *netns.NS
	Script string // its file name in internal/testbed/browser
	Args   []string
	// Browsers the script launches: "chromium", "firefox" or a
	// comma-separated mix (meeting.mjs's BROWSERS); "" is chromium.
	Browsers       string
	Env            []string // beside a HOME of the test's own
	Stdout, Stderr io.Writer
}

// BrowserDir is where the scripts and their npm modules are.
func BrowserDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "browser")
}

// Command is the script's command under ctx, once its prerequisites are
// there (node, the npm modules and the browsers it launches: missing,
// the test skips, or fails under CI=true). The caller starts it
// (testenv.StartGroup: the test's end kills its browsers).
func (s BrowserScript) Command(t testing.TB, ctx context.Context) *exec.Cmd {
	t.Helper()
	node := testenv.RequireCommand(t, "node")
	modules := filepath.Join(BrowserDir(), "node_modules")
	browsers := s.Browsers
	if browsers == "" {
		browsers = "chromium"
	}
	if strings.Contains(browsers, "chromium") {
		testenv.RequireCommand(t, "chromium")
		if _, err := os.Stat(filepath.Join(modules, "playwright-core")); err != nil {
			testenv.Missing(t, "playwright-core not installed (scripts/install-deps runs npm ci)")
		}
	}
	if strings.Contains(browsers, "firefox") {
		testenv.RequireCommand(t, "firefox-esr")
		if _, err := os.Stat(filepath.Join(modules, "puppeteer-core")); err != nil {
			testenv.Missing(t, "puppeteer-core not installed (scripts/install-deps runs npm ci)")
		}
	}
	args := append([]string{"netns", "exec", s.NS.Name, node, filepath.Join(BrowserDir(), s.Script)}, s.Args...)
	cmd := exec.CommandContext(ctx, "ip", args...)
	cmd.Env = append(append(os.Environ(), "HOME="+t.TempDir(), "BROWSERS="+browsers), s.Env...)
	cmd.Stdout, cmd.Stderr = s.Stdout, s.Stderr
	return cmd
}

// Run runs the script to its end (killed with its browsers if the test
// ends first).
func (s BrowserScript) Run(t testing.TB, ctx context.Context) error {
	t.Helper()
	return testenv.StartGroup(t, s.Command(t, ctx))()
}
