// Command testreport reads `go test -json` on stdin and prints what `go
// test` prints without -v (each package's result, the output of the tests
// that fail), then the slowest tests of the run: make test's summary.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
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

const slowest = 10

func main() {
	if err := report(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		os.Exit(1)
	}
}

func report(in io.Reader, out io.Writer) error {
	held := map[string][]string{} // a running test's output, printed if it fails
	var tests []timed
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(out, sc.Text()) // (a build error, say: as it came)
			continue
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
			flush(out, held, key, e)
		}
	}
	sort.Slice(tests, func(i, j int) bool { return tests[i].elapsed > tests[j].elapsed })
	fmt.Fprintf(out, "\nslowest tests:\n")
	for _, t := range tests[:min(slowest, len(tests))] {
		fmt.Fprintf(out, "%8.1fs  %s\n", t.elapsed, t.name)
	}
	return sc.Err()
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
