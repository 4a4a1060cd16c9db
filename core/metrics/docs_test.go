package metrics

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// Paths of the documents checked against the catalog, from this package.
const (
	metricsDoc = "../../docs/metrics.md"
	rulesFile  = "../../docs/alerts/guestlink-rules.yml"
)

// docRow matches a row of docs/metrics.md's table:
// | `name` | type | `label`, `label` | meaning |
var docRow = regexp.MustCompile("^\\| `(guestlink_[a-z_]+)` \\| ([a-z]+) \\|([^|]*)\\|")

// TestMetricsDoc checks that docs/metrics.md's table lists exactly the
// catalog, with the same types and labels, in the same order.
func TestMetricsDoc(t *testing.T) {
	data, err := os.ReadFile(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	var rows []Info
	for line := range strings.Lines(string(data)) {
		m := docRow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var labels []string
		for l := range strings.SplitSeq(m[3], ",") {
			if l = strings.Trim(strings.TrimSpace(l), "`"); l != "" {
				labels = append(labels, l)
			}
		}
		rows = append(rows, Info{Name: m[1], Type: m[2], Labels: labels})
	}
	if len(rows) != len(Catalog) {
		t.Errorf("the doc's table has %d metrics, the catalog %d", len(rows), len(Catalog))
	}
	for i, info := range Catalog {
		if i >= len(rows) {
			t.Errorf("%s is not in the doc's table", info.Name)
			continue
		}
		r := rows[i]
		if r.Name != info.Name || r.Type != info.Type || !slices.Equal(r.Labels, info.Labels) {
			t.Errorf("doc row %d: %s %s %q; catalog: %s %s %q", i+1, r.Name, r.Type, r.Labels, info.Name, info.Type, info.Labels)
		}
	}
}

// rules is the shape of a Prometheus rules file.
type rules struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

var (
	// quoted strings of a PromQL expression (label values, regexps).
	promString = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	// label matchers and grouping lists: their names are labels.
	promBraces = regexp.MustCompile(`\{[^}]*\}|\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promName   = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	// label matchers of an expression: {name="value", ...}.
	promMatchers = regexp.MustCompile(`\{([^}]*)\}`)
	promLabel    = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
)

// metricNames returns the names of the guestlink, go and process metrics
// an expression reads (histogram series mapped to their family).
func metricNames(expr string) []string {
	expr = promString.ReplaceAllString(expr, `""`)
	expr = promBraces.ReplaceAllString(expr, " ")
	var out []string
	for _, n := range promName.FindAllString(expr, -1) {
		if !strings.HasPrefix(n, "guestlink_") && !strings.HasPrefix(n, "go_") && !strings.HasPrefix(n, "process_") {
			continue
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(n, suffix); ok && isHistogram(base) {
				n = base
			}
		}
		out = append(out, n)
	}
	return out
}

func isHistogram(name string) bool {
	return slices.ContainsFunc(Catalog, func(i Info) bool { return i.Name == name && i.Type == Histogram })
}

// TestAlertRules parses the example rules file and checks every rule: an
// alert name, an expression reading only metrics the registry exports
// (with labels they have), a severity and a summary.
func TestAlertRules(t *testing.T) {
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var rf rules
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&rf); err != nil {
		t.Fatalf("parsing %s: %v", rulesFile, err)
	}
	// Every metric the registry exports, and its label names.
	e := newEnv(t, fakePlugins{{Name: "sim", Healthy: true}}, epoch)
	e.insts.set(running("a", "sim", 0, "Running", 103, ""))
	exercise(e.m)
	mfs, err := e.m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string][]string{}
	for _, mf := range mfs {
		labels := []string{}
		if len(mf.GetMetric()) > 0 {
			for _, l := range mf.GetMetric()[0].GetLabel() {
				labels = append(labels, l.GetName())
			}
		}
		exported[mf.GetName()] = labels
	}

	n := 0
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			n++
			t.Run(r.Alert, func(t *testing.T) {
				if r.Alert == "" || !strings.HasPrefix(r.Alert, "Guestlink") {
					t.Errorf("alert name %q: want Guestlink...", r.Alert)
				}
				names := metricNames(r.Expr)
				if len(names) == 0 {
					t.Fatalf("expression %q reads no guestlink metric", r.Expr)
				}
				for _, name := range names {
					labels, ok := exported[name]
					if !ok {
						t.Errorf("expression %q reads %s, which is not exported", r.Expr, name)
						continue
					}
					for _, braces := range promMatchers.FindAllStringSubmatch(promString.ReplaceAllString(r.Expr, `""`), -1) {
						for _, m := range promLabel.FindAllStringSubmatch(braces[1], -1) {
							if !slices.Contains(labels, m[1]) {
								t.Errorf("expression %q matches label %s, which %s lacks (labels %q)", r.Expr, m[1], name, labels)
							}
						}
					}
				}
				for _, m := range regexp.MustCompile(`\bby\s*\(([^)]*)\)`).FindAllStringSubmatch(r.Expr, -1) {
					for l := range strings.SplitSeq(m[1], ",") {
						l = strings.TrimSpace(l)
						for _, name := range names {
							if !slices.Contains(exported[name], l) {
								t.Errorf("expression %q groups by %s, which %s lacks", r.Expr, l, name)
							}
						}
					}
				}
				if r.Labels["severity"] == "" {
					t.Error("no severity label")
				}
				if r.Annotations["summary"] == "" {
					t.Error("no summary annotation")
				}
			})
		}
	}
	if n < 5 {
		t.Fatalf("%d rules, want the example's (agents lost, flapping, plugin restarts, stuck not Ready, events dropped)", n)
	}
}

// TestMetricNames checks the expression scanner the rules test relies on.
func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (backend) (increase(guestlink_agent_lost_total[15m])) > 3`, []string{"guestlink_agent_lost_total"}},
		{`histogram_quantile(0.9, sum by (le, backend) (rate(guestlink_instance_start_to_ready_seconds_bucket[5m])))`,
			[]string{"guestlink_instance_start_to_ready_seconds"}},
		{`guestlink_instances{status="guestlink_fake"} / on (backend) go_goroutines`, []string{"guestlink_instances", "go_goroutines"}},
		{`guestlink_nope_total > 0`, []string{"guestlink_nope_total"}},
	}
	for _, tt := range tests {
		if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}
