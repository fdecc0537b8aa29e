package packaging

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/ebrtc/ebrtc/internal/forwarding"
	"github.com/ebrtc/ebrtc/internal/testbed"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

var (
	manifestPath = filepath.Join(repoRoot, "deploy/kubernetes/ebrtc-turn.yaml")
	// The validator is a module of its own, so that kubeconform and its
	// dependencies stay out of the main module.
	validatorDir = filepath.Join(repoRoot, "deploy/kubernetes/validate")
)

// The manifest validates against the Kubernetes schemas, offline
// (deploy/kubernetes/validate: kubeconform on the OpenAPI spec of the
// pinned k8s.io/kubernetes module), and copies with a misspelt field, a
// wrong type or a missing required field do not.
func TestKubernetesManifestValidates(t *testing.T) {
	goCmd := testenv.RequireCommand(t, "go")
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	manifest := string(b)
	mutations := []struct{ name, from, to, want string }{
		{"misspelt field", "hostNetwork: true", "hostNetwrok: true", "additional properties 'hostNetwrok' not allowed"},
		{"misspelt nested field", "matchLabels:", "matchLabel:", "additional properties 'matchLabel' not allowed"},
		{"string for integer", "containerPort: 9641", `containerPort: "9641"`, "got string, want integer"},
		{"string for boolean", "readOnlyRootFilesystem: true", "readOnlyRootFilesystem: yes-please", "got string, want boolean"},
		{"required field missing", "- name: turn\n", "- nam: turn\n", "missing property 'name'"},
	}
	dir := t.TempDir()
	abs, err := filepath.Abs(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{abs}
	for i, m := range mutations {
		if strings.Count(manifest, m.from) != 1 {
			t.Fatalf("%s: %q occurs %d times in the manifest, want once", m.name, m.from, strings.Count(manifest, m.from))
		}
		f := filepath.Join(dir, fmt.Sprintf("mutation%d.yaml", i))
		if err := os.WriteFile(f, []byte(strings.Replace(manifest, m.from, m.to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	report := filepath.Join(dir, "report.json")
	cmd := exec.Command(goCmd, append([]string{"run", ".", "-report", report}, files...)...)
	cmd.Dir = validatorDir
	// Its own go.mod and go.sum decide, whatever the caller's settings.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("validator ran in %v", time.Since(start).Round(time.Millisecond))
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("go run validate: %v\n%s", err, out)
	}
	var errs map[string][]string
	b, rerr := os.ReadFile(report)
	if rerr != nil {
		t.Fatalf("no report (%v): %v\n%s", rerr, err, out)
	}
	if err := json.Unmarshal(b, &errs); err != nil {
		t.Fatal(err)
	}
	if got := errs[abs]; len(got) > 0 || !slices.Contains(files, abs) {
		t.Errorf("the manifest does not validate:\n%s", strings.Join(got, "\n"))
	}
	for i, m := range mutations {
		got := strings.Join(errs[files[i+1]], "\n")
		if !strings.Contains(got, m.want) {
			t.Errorf("%s (%q -> %q): want an error with %q, got:\n%s", m.name, m.from, m.to, m.want, got)
		} else {
			t.Logf("%s: %s", m.name, got)
		}
	}
}

// manifest is the parsed YAML documents of the manifest.
type manifest []map[string]any

func readManifest(t *testing.T) manifest {
	t.Helper()
	b, err := os.ReadFile(manifestPath)
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return m
		} else if err != nil {
			t.Fatal(err)
		}
		if doc != nil {
			m = append(m, doc)
		}
	}
}

// object is the document of a kind (the only one of it).
func (m manifest) object(t *testing.T, kind string) map[string]any {
	t.Helper()
	var found map[string]any
	for _, doc := range m {
		if doc["kind"] == kind {
			if found != nil {
				t.Fatalf("more than one %s", kind)
			}
			found = doc
		}
	}
	if found == nil {
		t.Fatalf("no %s in the manifest", kind)
	}
	return found
}

// at follows keys and list indices (int) through decoded YAML.
func at(t *testing.T, v any, path ...any) any {
	t.Helper()
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				t.Fatalf("%v: not a map at %q", path, p)
			}
			v = m[p]
		case int:
			l, ok := v.([]any)
			if !ok || p >= len(l) {
				t.Fatalf("%v: no item %d", path, p)
			}
			v = l[p]
		}
	}
	return v
}

func strs(t *testing.T, v any) []string {
	t.Helper()
	l, _ := v.([]any)
	out := make([]string, 0, len(l))
	for _, x := range l {
		s, ok := x.(string)
		if !ok {
			t.Fatalf("%v is not a list of strings", v)
		}
		out = append(out, s)
	}
	return out
}

// container is the DaemonSet's one container, as the kubelet would run it.
type container struct {
	command, args []string
	env           []envVar
	caps          []string // CAP_ names
	uid           int
	noNewPrivs    bool
	ports         map[string]int // by name
	readiness     [2]any         // path, port
	liveness      [2]any
	configMount   string // where the ConfigMap's files appear
}

type envVar struct {
	name     string
	value    string // with $(VAR) references
	fieldRef string
	secret   [2]string // name, key
}

func daemonSetContainer(t *testing.T, m manifest) container {
	t.Helper()
	ds := m.object(t, "DaemonSet")
	pod := at(t, ds, "spec", "template", "spec")
	if at(t, pod, "hostNetwork") != true {
		t.Error("the DaemonSet's pods are not on the host network")
	}
	if at(t, pod, "dnsPolicy") != "ClusterFirstWithHostNet" {
		t.Error("dnsPolicy is not ClusterFirstWithHostNet (cluster DNS with hostNetwork)")
	}
	if l, _ := at(t, pod, "containers").([]any); len(l) != 1 {
		t.Fatalf("%d containers, want 1", len(l))
	}
	spec := at(t, pod, "containers", 0)
	sc := at(t, spec, "securityContext")
	c := container{
		command: strs(t, at(t, spec, "command")),
		args:    strs(t, at(t, spec, "args")),
		ports:   map[string]int{},
	}
	uid, ok := at(t, sc, "runAsUser").(int)
	if !ok {
		t.Fatal("no runAsUser")
	}
	c.uid = uid
	c.noNewPrivs = at(t, sc, "allowPrivilegeEscalation") == false
	if drop := strs(t, at(t, sc, "capabilities", "drop")); !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("capabilities drop %v, want [ALL]", drop)
	}
	for _, name := range strs(t, at(t, sc, "capabilities", "add")) {
		c.caps = append(c.caps, "CAP_"+name)
	}
	for i := range len(at(t, spec, "env").([]any)) {
		e := at(t, spec, "env", i).(map[string]any)
		v := envVar{name: e["name"].(string)}
		if s, ok := e["value"].(string); ok {
			v.value = s
		} else if from, ok := e["valueFrom"].(map[string]any); ok {
			if f, ok := from["fieldRef"]; ok {
				v.fieldRef = at(t, f, "fieldPath").(string)
			} else {
				v.secret = [2]string{at(t, from, "secretKeyRef", "name").(string), at(t, from, "secretKeyRef", "key").(string)}
			}
		}
		c.env = append(c.env, v)
	}
	for i := range len(at(t, spec, "ports").([]any)) {
		p := at(t, spec, "ports", i).(map[string]any)
		c.ports[p["name"].(string)] = p["containerPort"].(int)
	}
	c.readiness = [2]any{at(t, spec, "readinessProbe", "httpGet", "path"), at(t, spec, "readinessProbe", "httpGet", "port")}
	c.liveness = [2]any{at(t, spec, "livenessProbe", "httpGet", "path"), at(t, spec, "livenessProbe", "httpGet", "port")}
	volumes := map[string]any{}
	for i := range len(at(t, pod, "volumes").([]any)) {
		v := at(t, pod, "volumes", i).(map[string]any)
		volumes[v["name"].(string)] = v
	}
	for i := range len(at(t, spec, "volumeMounts").([]any)) {
		vm := at(t, spec, "volumeMounts", i).(map[string]any)
		if v, ok := volumes[vm["name"].(string)].(map[string]any); ok && v["configMap"] != nil {
			c.configMount = vm["mountPath"].(string)
		}
	}
	return c
}

// environment resolves the container's variables as the kubelet does:
// fieldRef status.hostIP is the node's address, secretKeyRef reads the
// Secret, $(VAR) expands earlier variables.
func (c container) environment(t *testing.T, hostIP string, secrets map[string]map[string]string) []string {
	t.Helper()
	vars := map[string]string{}
	var out []string
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, e := range c.env {
		var v string
		switch {
		case e.fieldRef == "status.hostIP":
			v = hostIP
		case e.fieldRef != "":
			t.Fatalf("env %s: fieldRef %s is not emulated", e.name, e.fieldRef)
		case e.secret[0] != "":
			s, ok := secrets[e.secret[0]][e.secret[1]]
			if !ok {
				t.Fatalf("env %s: no key %s in Secret %s", e.name, e.secret[1], e.secret[0])
			}
			v = s
		default:
			v = ref.ReplaceAllStringFunc(e.value, func(m string) string { return vars[ref.FindStringSubmatch(m)[1]] })
		}
		vars[e.name] = v
		out = append(out, e.name+"="+v)
	}
	return out
}

// secrets are the manifest's Secrets' stringData.
func (m manifest) secrets(t *testing.T) map[string]map[string]string {
	t.Helper()
	out := map[string]map[string]string{}
	for _, doc := range m {
		if doc["kind"] != "Secret" {
			continue
		}
		data := map[string]string{}
		for k, v := range at(t, doc, "stringData").(map[string]any) {
			data[k] = v.(string)
		}
		out[at(t, doc, "metadata", "name").(string)] = data
	}
	return out
}

// The container's capabilities are the systemd unit's, and every EBRTC_
// variable it sets is a setting of `ebrtc turn`.
func TestKubernetesContainerSettings(t *testing.T) {
	m := readManifest(t)
	c := daemonSetContainer(t, m)
	caps := slices.Sorted(slices.Values(c.caps))
	if unit := unitCapabilities(t); !slices.Equal(caps, unit) {
		t.Errorf("container capabilities %v, the unit's %v", caps, unit)
	}
	if !c.noNewPrivs {
		t.Error("allowPrivilegeEscalation is not false")
	}
	if c.configMount == "" || !slices.Contains(c.args, c.configMount+"/turn.yaml") {
		t.Errorf("args %v do not read turn.yaml from the ConfigMap at %q", c.args, c.configMount)
	}
	for _, e := range c.env {
		if name, ok := strings.CutPrefix(e.name, "EBRTC_"); ok && !isTurnSetting(strings.ReplaceAll(strings.ToLower(name), "_", "-")) {
			t.Errorf("env %s is no setting of ebrtc turn", e.name)
		}
	}
}

// The container run as the kubelet would run it, in the testbed's server
// namespace standing for the node: uid 0 with only the added capabilities
// (bounding set, no_new_privs), /proc/sys read-only, the ConfigMap's
// turn.yaml, the environment from the manifest with the node's address
// (10.201.2.1, the testbed's relay side). With the Secret as shipped (empty)
// it refuses to start; without lo's forwarding sysctls on the node, the fast
// path stays off; with both, XDP attaches without a warning, the probes
// answer, and a channel is relayed on the fast path.
func TestKubernetesContainerRelaysOnFastPath(t *testing.T) {
	m := readManifest(t)
	c := daemonSetContainer(t, m)
	bin := ebrtcBinary(t)
	tb := newTestbed(t)
	hostIP := testbed.ServerPeerIP4.String()

	dir := t.TempDir()
	config := at(t, m.object(t, "ConfigMap"), "data", "turn.yaml").(string)
	if err := os.WriteFile(filepath.Join(dir, "turn.yaml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	if len(c.command) != 1 || filepath.Base(c.command[0]) != "ebrtc" {
		t.Fatalf("command %v, want the ebrtc binary", c.command)
	}
	var args []string
	for _, a := range c.args {
		args = append(args, strings.Replace(a, c.configMount, dir, 1))
	}
	args = append(args, runtimeDirArgs(t, c.uid)...) // the hostPath /run/ebrtc
	confined := func(secrets map[string]map[string]string) confinement {
		env := c.environment(t, hostIP, secrets)
		// The testbed's peers are in private ranges, refused by default.
		env = append(env, "EBRTC_ALLOW_PEER="+strings.Join(testbed.Prefixes, ","))
		return confinement{uid: c.uid, caps: c.caps, readOnlyProcSys: true, env: env}
	}

	t.Run("shipped empty secret", func(t *testing.T) {
		_, err := startConfined(t, tb, confined(m.secrets(t)), bin, args...)
		if err == nil || !strings.Contains(err.Error(), "no credentials") {
			t.Fatalf("started with the empty secret (%v)", err)
		}
	})
	secrets := m.secrets(t)
	for name := range secrets {
		for key := range secrets[name] {
			secrets[name][key] = restSecret
		}
	}
	t.Run("node without lo forwarding", func(t *testing.T) {
		r, err := startConfined(t, tb, confined(secrets), bin, args...)
		if err != nil {
			t.Fatal(err)
		}
		if out := r.Output(); !strings.Contains(out, "fast path off") || !strings.Contains(out, "lo does not forward") {
			t.Fatalf("the fast path started without lo's forwarding sysctls:\n%s", out)
		}
	})

	// What the node's sysctl.d drop-in does (docs/operations.md, "Install").
	if err := tb.Server.Do(func() error { _, err := forwarding.Enable("lo"); return err }); err != nil {
		t.Fatal(err)
	}
	r, err := startConfined(t, tb, confined(secrets), bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	requireRunsAs(t, r, c.uid, c.caps)
	requireFastPathStarted(t, r, testbed.ServerCliIface, testbed.ServerPeerIface)
	for name, probe := range map[string][2]any{"readiness": c.readiness, "liveness": c.liveness} {
		port, ok := probe[1].(int)
		if !ok {
			port = c.ports[probe[1].(string)]
		}
		// The kubelet probes a hostNetwork pod at the node's address.
		url := fmt.Sprintf("http://%s:%d%s", hostIP, port, probe[0])
		if status := httpGet(t, tb, hostIP, port, probe[0].(string)); status != http.StatusOK {
			t.Errorf("%s probe %s: status %d", name, url, status)
		}
	}
	requireChannelOnFastPath(t, tb, server4, restSecret, fmt.Sprintf("%s:%d", hostIP, c.ports["metrics"]))
}

// httpGet is the status of GET path from inside the server namespace.
func httpGet(t *testing.T, tb *testbed.Testbed, host string, port int, path string) int {
	t.Helper()
	addr := fmt.Sprintf("%s:%d", host, port)
	conn, err := testbed.DialTCP(tb.Server, addr)
	if err != nil {
		t.Fatalf("probe %s: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, addr)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("probe %s: %v", addr, err)
	}
	defer resp.Body.Close()
	return resp.StatusCode
}
