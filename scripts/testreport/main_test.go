package main

import (
	"strings"
	"testing"
)

// TestReport: a passing test's output is dropped, a failing one's printed
// where it failed and its messages (not its debug log) again at the end,
// after the slowest tests.
func TestReport(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:12: phase one\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"time=x level=DEBUG msg=probe\n"}`,
		`{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:40: lifted: too slow\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestA","Elapsed":3}`,
		`{"Action":"output","Package":"p","Test":"TestB","Output":"    b_test.go:7: fine\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestB","Elapsed":2}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t5.0s\n"}`,
	}, "\n")
	var out strings.Builder
	if err := report(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	want := "    a_test.go:12: phase one\ntime=x level=DEBUG msg=probe\n    a_test.go:40: lifted: too slow\n" +
		"FAIL\tp\t5.0s\n\nslowest tests:\n     2.0s  p TestB\n" +
		"\nFAIL p TestA:\n    a_test.go:12: phase one\n    a_test.go:40: lifted: too slow\n"
	if out.String() != want {
		t.Errorf("report:\n%s\nwant:\n%s", out.String(), want)
	}
}

// The run's length, from go test's first event to its last, comes before
// the slowest tests.
func TestReportRunLength(t *testing.T) {
	in := `{"Time":"2026-11-27T13:00:00Z","Action":"start","Package":"p"}
{"Time":"2026-11-27T13:02:05Z","Action":"pass","Package":"p","Test":"TestA","Elapsed":125}`
	var out strings.Builder
	if err := report(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "\ngo test ran 2m5s (its first event to its last)\n\nslowest tests:\n") {
		t.Errorf("report:\n%s", out.String())
	}
}
