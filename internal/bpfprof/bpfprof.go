// Package bpfprof attributes perf samples to the source lines of a loaded
// BPF program. perf resolves a JIT-compiled program only to its symbol; the
// kernel's JIT line info (address of each BTF line record in the image)
// takes a sample down to a line of bpf/*.c, and a sample in a kernel
// helper to the line that called it. This needs no PMU (cpu-clock samples
// do) and no libbfd, which perf annotate and bpftool prog profile do.
package bpfprof

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
)

// Image is where a loaded program's machine code lies and which source line
// each piece of it came from.
type Image struct {
	Name  string
	ID    ebpf.ProgramID
	Start uint64
	End   uint64
	lines []lineAt // sorted by addr
}

type lineAt struct {
	addr uint64
	line string // file:number  source text
}

// Find takes the newest loaded program called name and reads its image's
// line table. It must run while the program is loaded (during the load the
// samples are taken of).
func Find(name string) (*Image, error) {
	var newest *ebpf.ProgramInfo
	var newestID ebpf.ProgramID
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, err
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // unloaded meanwhile
		}
		info, err := p.Info()
		p.Close()
		if err == nil && info.Name == truncName(name) && id > newestID {
			newest, newestID = info, id
		}
	}
	if newest == nil {
		return nil, fmt.Errorf("no loaded BPF program named %q", name)
	}
	return imageOf(name, newestID, newest)
}

// The kernel keeps 15 characters of a program's name.
func truncName(name string) string {
	if len(name) > 15 {
		return name[:15]
	}
	return name
}

func imageOf(name string, id ebpf.ProgramID, info *ebpf.ProgramInfo) (*Image, error) {
	ksyms, ok := info.JitedKsymAddrs()
	lens, ok2 := info.JitedFuncLens()
	jlines, ok3 := info.JitedLineInfos()
	if !ok || !ok2 || !ok3 || len(ksyms) == 0 || len(ksyms) != len(lens) {
		return nil, fmt.Errorf("program %q: no JIT addresses (needs root and kernel.kptr_restrict < 2)", name)
	}
	offsets, err := info.LineInfos()
	if err != nil {
		return nil, fmt.Errorf("program %q: line info: %w", name, err)
	}
	if len(offsets) != len(jlines) {
		return nil, fmt.Errorf("program %q: %d line records, %d JIT addresses", name, len(offsets), len(jlines))
	}
	img := &Image{Name: name, ID: id, Start: uint64(ksyms[0]), End: uint64(ksyms[0]) + uint64(lens[0])}
	for i, f := range ksyms {
		img.Start = min(img.Start, uint64(f))
		img.End = max(img.End, uint64(f)+uint64(lens[i]))
	}
	for i, o := range offsets {
		l := o.Line
		text := fmt.Sprintf("%s:%d  %s", filepath.Base(l.FileName()), l.LineNumber(), strings.TrimSpace(l.Line()))
		img.lines = append(img.lines, lineAt{addr: jlines[i], line: text})
	}
	sort.SliceStable(img.lines, func(i, j int) bool { return img.lines[i].addr < img.lines[j].addr })
	return img, nil
}

func (img *Image) contains(ip uint64) bool { return ip >= img.Start && ip < img.End }

// lineOf is the source line whose code holds ip.
func (img *Image) lineOf(ip uint64) string {
	i := sort.Search(len(img.lines), func(i int) bool { return img.lines[i].addr > ip })
	if i == 0 {
		return "(prologue)"
	}
	return img.lines[i-1].line
}

// Report is where a program's samples went.
type Report struct {
	Samples int            // samples inside the program or a helper it called
	Self    int            // of those, in the program's own code
	Lines   map[string]int // by source line, the helpers it called included
	Helpers map[string]int // by kernel function the program called (leaf)
}

// Attribute reads `perf script -F ip,sym` output of a recording taken with
// -g and charges each sample that ran in img, or in a kernel function it
// called, to a source line.
func Attribute(r io.Reader, img *Image) (*Report, error) {
	rep := &Report{Lines: map[string]int{}, Helpers: map[string]int{}}
	var stack []frame
	flush := func() {
		defer func() { stack = stack[:0] }()
		for i, f := range stack {
			if !img.contains(f.ip) {
				continue
			}
			rep.Samples++
			if i == 0 {
				rep.Self++
				rep.Lines[img.lineOf(f.ip)]++
				return
			}
			// A return address: the call is just before it.
			rep.Lines[img.lineOf(f.ip-1)]++
			rep.Helpers[stack[0].sym]++
			return
		}
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			flush()
			continue
		}
		if f, ok := parseFrame(line); ok {
			stack = append(stack, f)
		}
	}
	flush()
	return rep, sc.Err()
}

type frame struct {
	ip  uint64
	sym string
}

// parseFrame reads "ffffffffc0a1b2c3 sym+0x12 (module)".
func parseFrame(line string) (frame, bool) {
	fields := strings.Fields(line)
	if len(fields) < 2 {
		return frame{}, false
	}
	ip, err := strconv.ParseUint(fields[0], 16, 64)
	if err != nil {
		return frame{}, false
	}
	sym, _, _ := strings.Cut(fields[1], "+0x")
	return frame{ip: ip, sym: sym}, true
}

// Write prints the report: the top lines and helpers, in percent of the
// program's samples.
func (rep *Report) Write(w io.Writer, top int) {
	if rep.Samples == 0 {
		fmt.Fprintln(w, "no samples in the program (was it running?)")
		return
	}
	pct := func(n int) float64 { return 100 * float64(n) / float64(rep.Samples) }
	fmt.Fprintf(w, "%d samples: %.1f%% in the program's own code, %.1f%% in kernel functions it called\n\n",
		rep.Samples, pct(rep.Self), pct(rep.Samples-rep.Self))
	fmt.Fprintln(w, "by kernel function called:")
	for _, kv := range sorted(rep.Helpers, top) {
		fmt.Fprintf(w, "  %5.1f%%  %s\n", pct(kv.n), kv.k)
	}
	fmt.Fprintln(w, "\nby source line (calls included):")
	for _, kv := range sorted(rep.Lines, top) {
		fmt.Fprintf(w, "  %5.1f%%  %s\n", pct(kv.n), kv.k)
	}
}

type kv struct {
	k string
	n int
}

func sorted(m map[string]int, top int) []kv {
	out := make([]kv, 0, len(m))
	for k, n := range m {
		out = append(out, kv{k, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].n > out[j].n || (out[i].n == out[j].n && out[i].k < out[j].k) })
	if len(out) > top {
		out = out[:top]
	}
	return out
}
