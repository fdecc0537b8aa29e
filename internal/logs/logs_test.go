package logs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// JSON lines carry level, msg and the pion scope; levels filter, trace
// included; a quiet scope keeps to warnings unless debugging.
func TestJSONAndPion(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	f := PionFactory(l, "turn")
	f.NewLogger("ice").Infof("candidate %d", 7)
	f.NewLogger("ice").Debug("hidden at info")
	f.NewLogger("turn").Info("per-datagram refusal")
	f.NewLogger("turn").Warn("kept")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(lines), buf.String())
	}
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	if first["msg"] != "candidate 7" || first["level"] != "INFO" || first["scope"] != "ice" {
		t.Errorf("first line %v", first)
	}

	buf.Reset()
	l, _ = New(&buf, "text", "trace")
	PionFactory(l, "turn").NewLogger("turn").Tracef("x %s", "y")
	if !strings.Contains(buf.String(), "level=TRACE") || !strings.Contains(buf.String(), `msg="x y"`) {
		t.Errorf("trace at trace level: %q", buf.String())
	}
	if _, err := New(&buf, "xml", "info"); err == nil {
		t.Error("format xml accepted")
	}
	if _, err := New(&buf, "json", "loud"); err == nil {
		t.Error("level loud accepted")
	}
}
