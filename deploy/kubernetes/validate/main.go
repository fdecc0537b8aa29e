// Command validate checks Kubernetes manifests against the API's OpenAPI
// schemas with kubeconform, offline: the schemas come from the OpenAPI v3
// spec that the k8s.io/kubernetes Go module ships (api/openapi-spec/v3),
// fetched through the Go module proxy, pinned by its hash, and turned into
// kubeconform's strict JSON schemas (unknown fields are errors).
//
//	go run . [-report FILE] MANIFEST...
//
// It prints each resource's verdict and exits 1 if any is not valid. With
// -report it also writes {"file": ["path: error", ...]} as JSON (an empty
// list for a valid file), for tests that expect particular errors.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/yannh/kubeconform/pkg/validator"
	"sigs.k8s.io/yaml"
)

// The Kubernetes release whose schemas apply, and the Go checksum of its
// module (go.sum's h1: form), so that a changed download is refused.
const (
	kubernetesModule  = "k8s.io/kubernetes"
	kubernetesVersion = "v1.37.2"
	kubernetesSum     = "h1:A2VDEiObzkYqFTKhSsn0ZEb0RlLEXpHWj93gi2HqEwE="
	specDir           = "api/openapi-spec/v3"
)

func main() {
	report := flag.String("report", "", "write the errors per file as JSON to this file")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: validate [-report FILE] MANIFEST...")
		os.Exit(2)
	}
	errs, err := run(flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "validate:", err)
		os.Exit(2)
	}
	if *report != "" {
		b, _ := json.MarshalIndent(errs, "", "  ")
		if err := os.WriteFile(*report, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "validate:", err)
			os.Exit(2)
		}
	}
	bad := false
	for _, file := range flag.Args() {
		for _, e := range errs[file] {
			fmt.Printf("%s: %s\n", file, e)
			bad = true
		}
	}
	if bad {
		os.Exit(1)
	}
	fmt.Printf("%d manifests valid against the Kubernetes %s schemas\n", flag.NArg(), kubernetesVersion)
}

// run validates each file and returns its errors ("" key never used).
func run(files []string) (map[string][]string, error) {
	specs, err := openAPISpecDir()
	if err != nil {
		return nil, err
	}
	schemas, err := os.MkdirTemp("", "kubeconform-schemas")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(schemas)
	// Schemas for the kinds the manifests use, named as the template says.
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		for _, gvk := range kinds(b) {
			if err := writeSchema(specs, schemas, gvk); err != nil {
				return nil, fmt.Errorf("%s: %w", file, err)
			}
		}
	}
	v, err := validator.New([]string{filepath.Join(schemas, "{{ .ResourceKind }}_{{ .Group }}_{{ .ResourceAPIVersion }}.json")},
		validator.Opts{Strict: true, KubernetesVersion: strings.TrimPrefix(kubernetesVersion, "v")})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		out[file] = []string{}
		n := 0
		for _, res := range v.Validate(file, f) { // closes f
			switch res.Status {
			case validator.Valid:
				n++
			case validator.Empty:
			case validator.Invalid:
				// kubeconform's own list stops at the first level of
				// nesting; its error text names the failing fields.
				msg := res.Err.Error()
				if _, leaves, ok := strings.Cut(msg, " - "); ok {
					msg = leaves
				}
				what := "resource"
				if sig, err := res.Resource.Signature(); err == nil {
					what = sig.Kind + " " + sig.Name
				}
				out[file] = append(out[file], what+": "+msg)
			default: // Error, Skipped: no schema, unparsable YAML
				out[file] = append(out[file], fmt.Sprintf("status %d: %v", res.Status, res.Err))
			}
		}
		if n == 0 && len(out[file]) == 0 {
			out[file] = append(out[file], "no resources")
		}
	}
	return out, nil
}

// openAPISpecDir downloads (or finds in the module cache) k8s.io/kubernetes
// at the pinned version and returns its OpenAPI v3 directory.
func openAPISpecDir() (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", kubernetesModule+"@"+kubernetesVersion)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go mod download %s@%s: %v\n%s%s", kubernetesModule, kubernetesVersion, err, stderr.String(), out)
	}
	var mod struct{ Dir, Sum, Error string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return "", err
	}
	if mod.Error != "" {
		return "", errors.New(mod.Error)
	}
	if mod.Sum != kubernetesSum {
		return "", fmt.Errorf("%s@%s has checksum %s, want %s", kubernetesModule, kubernetesVersion, mod.Sum, kubernetesSum)
	}
	return filepath.Join(mod.Dir, filepath.FromSlash(specDir)), nil
}

type groupVersionKind struct{ group, version, kind string }

// kinds lists the apiVersion/kind of each YAML document.
func kinds(b []byte) []groupVersionKind {
	var out []groupVersionKind
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if yaml.Unmarshal(doc, &head) != nil || head.Kind == "" {
			continue // kubeconform reports it
		}
		group, version, found := strings.Cut(head.APIVersion, "/")
		if !found {
			group, version = "", head.APIVersion
		}
		gvk := groupVersionKind{group, version, head.Kind}
		if !slices.Contains(out, gvk) {
			out = append(out, gvk)
		}
	}
	return out
}

// writeSchema writes the strict JSON schema of one kind: the kind's OpenAPI
// schema with every schema it refers to under "definitions".
func writeSchema(specs, dir string, gvk groupVersionKind) error {
	specFile := "api__" + gvk.version + "_openapi.json"
	templateGroup := gvk.version // kubeconform's .Group is the version for the core group
	if gvk.group != "" {
		specFile = "apis__" + gvk.group + "__" + gvk.version + "_openapi.json"
		templateGroup = strings.Split(gvk.group, ".")[0]
	}
	b, err := os.ReadFile(filepath.Join(specs, specFile))
	if err != nil {
		return fmt.Errorf("no OpenAPI schema for %s/%s: %w", gvk.group, gvk.version, err)
	}
	var spec struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: %w", specFile, err)
	}
	all := spec.Components.Schemas
	root := ""
	for name, s := range all {
		if hasGVK(s, gvk) {
			root = name
		}
	}
	if root == "" {
		return fmt.Errorf("kind %s is not in %s", gvk.kind, specFile)
	}
	defs := map[string]any{}
	var collect func(name string)
	collect = func(name string) {
		if _, done := defs[name]; done {
			return
		}
		s, ok := all[name]
		if !ok {
			return
		}
		defs[name] = s
		for _, ref := range refs(s) {
			collect(ref)
		}
	}
	collect(root)
	for name, s := range defs {
		defs[name] = strict(rewriteRefs(s))
	}
	// The kind's own schema at the top, so errors name the fields in it.
	doc := map[string]any{}
	for k, x := range defs[root].(map[string]any) {
		doc[k] = x
	}
	doc["$schema"] = "http://json-schema.org/draft-04/schema#"
	doc["definitions"] = defs
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	name := fmt.Sprintf("%s_%s_%s.json", strings.ToLower(gvk.kind), templateGroup, gvk.version)
	return os.WriteFile(filepath.Join(dir, name), out, 0o644)
}

func hasGVK(s map[string]any, want groupVersionKind) bool {
	list, _ := s["x-kubernetes-group-version-kind"].([]any)
	for _, e := range list {
		m, _ := e.(map[string]any)
		if m["group"] == want.group && m["version"] == want.version && m["kind"] == want.kind {
			return true
		}
	}
	return false
}

const componentRef = "#/components/schemas/"

// refs are the component names a schema refers to, at any depth.
func refs(v any) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				out = append(out, strings.TrimPrefix(s, componentRef))
			} else {
				out = append(out, refs(x)...)
			}
		}
	case []any:
		for _, x := range v {
			out = append(out, refs(x)...)
		}
	}
	return out
}

// rewriteRefs points OpenAPI's component references at "definitions".
func rewriteRefs(v any) any {
	switch v := v.(type) {
	case map[string]any:
		// OpenAPI wraps a reference that has a description or default in
		// allOf; a plain $ref (siblings ignored) validates the same and
		// reports the failing field instead of "allOf failed".
		if all, ok := v["allOf"].([]any); ok && len(all) == 1 {
			if inner, ok := all[0].(map[string]any); ok && len(inner) == 1 && inner["$ref"] != nil {
				return rewriteRefs(inner)
			}
		}
		m := make(map[string]any, len(v))
		for k, x := range v {
			if s, ok := x.(string); ok && k == "$ref" {
				m[k] = "#/definitions/" + strings.TrimPrefix(s, componentRef)
			} else {
				m[k] = rewriteRefs(x)
			}
		}
		return m
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = rewriteRefs(x)
		}
		return out
	}
	return v
}

// strict forbids properties a schema does not declare (what kubeconform's
// -strict schemas do), except where Kubernetes keeps unknown fields.
func strict(v any) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if k == "properties" {
				// A property may be named "properties": only its value is a schema map.
				props, _ := x.(map[string]any)
				for name, p := range props {
					props[name] = strict(p)
				}
				continue
			}
			v[k] = strict(x)
		}
		_, hasProps := v["properties"]
		_, hasAdditional := v["additionalProperties"]
		if hasProps && !hasAdditional && v["x-kubernetes-preserve-unknown-fields"] != true {
			v["additionalProperties"] = false
		}
		return v
	case []any:
		for i, x := range v {
			v[i] = strict(x)
		}
	}
	return v
}
