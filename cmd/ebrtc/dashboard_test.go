package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/metrics"
	"github.com/ebrtc/ebrtc/internal/offload"
	"github.com/ebrtc/ebrtc/internal/sfu"
	"github.com/ebrtc/ebrtc/internal/sfu/access"
	"github.com/ebrtc/ebrtc/pkg/afxdp"
)

// exported is every metric the commands export, with its labels, from the
// collectors' descriptions.
func exported() map[string]map[string]bool {
	cs := append(metrics.NewEvents().Collectors(), offload.NewCollector(nil, nil, nil), metrics.NewSourceGuardCollector(nil),
		metrics.NewSocketDropsCollector(nil), afxdp.NewCollector(nil), sfu.NewCollector("", nil, nil), admin.NewUserCollector(nil, true), joinGate())
	ch := make(chan *prometheus.Desc, 256)
	for _, c := range cs {
		c.Describe(ch)
	}
	close(ch)
	name := regexp.MustCompile(`fqName: "([^"]+)"`)
	labels := regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
	out := map[string]map[string]bool{}
	for d := range ch {
		s := d.String()
		m := name.FindStringSubmatch(s)
		if m == nil {
			continue
		}
		set := map[string]bool{"instance": true, "job": true}
		if l := labels.FindStringSubmatch(s); l != nil {
			for _, v := range strings.Split(l[1], ",") {
				if v = strings.TrimSpace(v); v != "" {
					set[v] = true
				}
			}
		}
		out[m[1]] = set
	}
	return out
}

// joinGate is the SFU's gate, the collector of its join refusals.
func joinGate() prometheus.Collector {
	g, err := access.New(access.Config{Open: true})
	if err != nil {
		panic(err)
	}
	return g
}

// Every query of the Grafana dashboard (deploy/grafana/ebrtc.json) names
// exported metrics, and groups, filters and labels its legends by labels
// those metrics have.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/ebrtc.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard without uid or panels")
	}
	have := exported()
	metricRe := regexp.MustCompile(`\bebrtc_[a-z0-9_]+`)
	byRe := regexp.MustCompile(`by \(([^)]*)\)`)
	matchRe := regexp.MustCompile(`([a-z_]+)\s*(?:=~|!=|!~|=)\s*"`)
	legendRe := regexp.MustCompile(`\{\{\s*([a-z_]+)\s*\}\}`)
	queried := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			names := metricRe.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("%s: %q queries no ebrtc metric", p.Title, tg.Expr)
			}
			labels := map[string]bool{}
			for _, n := range names {
				if have[n] == nil {
					t.Errorf("%s: %s is not exported", p.Title, n)
					continue
				}
				queried++
				for l := range have[n] {
					labels[l] = true
				}
			}
			var used []string
			for _, m := range byRe.FindAllStringSubmatch(tg.Expr, -1) {
				for _, l := range strings.Split(m[1], ",") {
					used = append(used, strings.TrimSpace(l))
				}
			}
			for _, m := range matchRe.FindAllStringSubmatch(tg.Expr, -1) {
				used = append(used, m[1])
			}
			for _, m := range legendRe.FindAllStringSubmatch(tg.Legend, -1) {
				used = append(used, m[1])
			}
			for _, l := range used {
				if !labels[l] {
					t.Errorf("%s: label %q is on none of %v", p.Title, l, names)
				}
			}
		}
	}
	t.Logf("%d panels, %d metric references, all exported", len(dash.Panels), queried)
}
