// Command testreport reads `go test -json` on stdin and prints what `go
// test` prints without -v (each package's result, the output of the tests
// that fail), then the slowest tests of the run and, again, what each
// failed test reported: make test's summary. (A CI log keeps its tail, and
// a failed meeting's debug log would push its reasons out of it.)
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Time    time.Time
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type timed struct {
	name    string
	elapsed float64
}

const (
	slowest  = 10
	reasons  = 12  // a failed test's last messages repeated in the summary
	longLine = 400 // (a message's characters kept)
)

// message is a t.Log or t.Error line's start ("    file_test.go:12: ").
var message = regexp.MustCompile(`^\s*[\w.-]+_test\.go:\d+: `)

// failure is a failed test and its last messages.
type failure struct {
	name     string
	messages []string
}

func main() {
	if err := report(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

func report(in io.Reader, out io.Writer) error {
	held := map[string][]string{} // a running test's output, printed if it fails
	var tests []timed
	var failed []failure
	var first, last time.Time
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(out, sc.Text()) // (a build error, say: as it came)
			continue
		}
		if !e.Time.IsZero() {
			if first.IsZero() {
				first = e.Time
			}
			last = e.Time
		}
		key := e.Package + " " + e.Test
		switch {
		case e.Action == "output" && e.Test != "":
			held[key] = append(held[key], e.Output)
		case e.Action == "output" && e.Output != "PASS\n":
			if strings.HasPrefix(e.Output, "FAIL") { // (a panic's or a timeout's output first)
				flush(out, held, key, event{Package: e.Package})
			}
			fmt.Fprint(out, e.Output)
		case e.Action == "pass" && e.Test != "":
			delete(held, key)
			if !strings.Contains(e.Test, "/") {
				tests = append(tests, timed{e.Package + " " + e.Test, e.Elapsed})
			}
		case e.Action == "fail":
			if e.Test != "" {
				failed = append(failed, failure{e.Package + " " + e.Test, lastMessages(held[key])})
			}
			flush(out, held, key, e)
		}
	}
	sort.Slice(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
	if !first.IsZero() {
		fmt.Fprintf(out, "\ngo test ran %v (its first event to its last)\n", last.Sub(first).Round(time.Second))
	}
	fmt.Fprintf(out, "\nslowest tests:\n")
	for _, t := range tests[:min(slowest, len(tests))] {
		fmt.Fprintf(out, "%8.1fs  %s\n", t.elapsed, t.name)
	}
	for _, f := range failed {
		fmt.Fprintf(out, "\nFAIL %s:\n", f.name)
		for _, m := range f.messages {
			fmt.Fprint(out, m)
		}
	}
	return sc.Err()
}

// lastMessages are a test's last t.Log and t.Error lines (the reasons it
// failed are among them: a test logs, then judges), each cut to longLine.
func lastMessages(output []string) []string {
	var out []string
	for _, line := range output {
		if !message.MatchString(line) {
			continue
		}
		if len(line) > longLine {
			line = line[:longLine] + "…\n"
		}
		out = append(out, line)
	}
	return out[max(0, len(out)-reasons):]
}

// flush prints what a failed test held; a package that fails (a panic, a
// timeout) prints what every test of it still held.
func flush(out io.Writer, held map[string][]string, key string, e event) {
	if e.Test != "" {
		fmt.Fprint(out, strings.Join(held[key], ""))
		delete(held, key)
		return
	}
	var keys []string
	for k := range held {
		if strings.HasPrefix(k, e.Package+" ") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprint(out, strings.Join(held[k], ""))
		delete(held, k)
	}
}
