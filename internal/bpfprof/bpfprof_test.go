package bpfprof

import (
	"strings"
	"testing"

	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// Samples in the program go to the line holding the address; samples in a
// kernel function go to the line of the call (the return address minus
// one) and to the function; samples elsewhere are not counted.
func TestAttribute(t *testing.T) {
	img := &Image{Name: "prog", Start: 0x1000, End: 0x1100, lines: []lineAt{
		{0x1000, "a.c:1  parse"},
		{0x1040, "a.c:2  lookup"},
		{0x1080, "a.c:3  rewrite"},
	}}
	script := `
	    1010 bpf_prog_x_prog+0x10 (bpf)
	    ffff0000 bpf_test_run+0x1 ([kernel.kallsyms])

	    ffffaaaa htab_map_hash+0x5 ([kernel.kallsyms])
	    ffffbbbb __htab_map_lookup_elem+0x9 ([kernel.kallsyms])
	    1080 bpf_prog_x_prog+0x80 (bpf)
	    ffff0000 bpf_test_run+0x1 ([kernel.kallsyms])

	    1090 bpf_prog_x_prog+0x90 (bpf)

	    ffffcccc do_idle+0x3 ([kernel.kallsyms])
	    ffffdddd cpu_startup_entry+0x1 ([kernel.kallsyms])
`
	rep, err := Attribute(strings.NewReader(script), img)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Samples != 3 || rep.Self != 2 {
		t.Errorf("samples %d self %d, want 3 and 2", rep.Samples, rep.Self)
	}
	// The call returned to 0x1080: it was made from the line before it.
	want := map[string]int{"a.c:1  parse": 1, "a.c:2  lookup": 1, "a.c:3  rewrite": 1}
	for k, n := range want {
		if rep.Lines[k] != n {
			t.Errorf("line %q: %d samples, want %d (%v)", k, rep.Lines[k], n, rep.Lines)
		}
	}
	if rep.Helpers["htab_map_hash"] != 1 || len(rep.Helpers) != 1 {
		t.Errorf("helpers %v, want htab_map_hash once", rep.Helpers)
	}
	var out strings.Builder
	rep.Write(&out, 10)
	if !strings.Contains(out.String(), "66.7% in the program's own code") {
		t.Errorf("report:\n%s", out.String())
	}
}

// Find reads a real program's JIT line table: every line lies in the image
// and names a line of the C source.
func TestFindLoadedProgram(t *testing.T) {
	testenv.RequireRoot(t)
	e, err := offload.Load(offload.Config{ListenPorts: []uint16{3478}, RelayPortMin: 49152, RelayPortMax: 65535})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	img, err := Find("turn_offload")
	if err != nil {
		t.Fatal(err)
	}
	if len(img.lines) < 100 || img.End <= img.Start {
		t.Fatalf("image %#x-%#x with %d lines", img.Start, img.End, len(img.lines))
	}
	for _, l := range img.lines {
		if l.addr < img.Start || l.addr >= img.End || !strings.Contains(l.line, ".") {
			t.Fatalf("line %q at %#x outside %#x-%#x", l.line, l.addr, img.Start, img.End)
		}
	}
	if _, err := Find("no_such_prog"); err == nil {
		t.Error("found a program that is not loaded")
	}
}
