// SPDX-License-Identifier: Apache-2.0

package examples

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docPages are the README and the pages under docs/, the documentation
// whose links and figures the tests below hold to the files they describe.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, pages...)
}

func readPage(t *testing.T, page string) string {
	t.Helper()
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`^#{1,6} +(.+?) *$`)
	// GitHub's heading anchors keep letters, digits, spaces, hyphens and
	// underscores, lower-cased, with spaces turned into hyphens.
	notAnchor = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// anchors are the fragment names GitHub gives a Markdown page's headings;
// a repeated heading gets -1, -2... Lines inside code fences are no headings.
func anchors(text string) map[string]bool {
	found := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		m := mdHeading.FindStringSubmatch(line)
		if fenced || m == nil {
			continue
		}
		slug := strings.ReplaceAll(notAnchor.ReplaceAllString(strings.ToLower(m[1]), ""), " ", "-")
		if n := seen[slug]; n > 0 {
			found[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			found[slug] = true
		}
		seen[slug]++
	}
	return found
}

// Every relative link of the README and docs/ points at a file or folder
// of the repository, and a link's #fragment at a heading of its page.
func TestDocsLinksResolve(t *testing.T) {
	for _, page := range docPages(t) {
		text := readPage(t, page)
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, fragment, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			info, err := os.Stat(path)
			if err != nil {
				t.Errorf("%s links to %s: %v", page, target, err)
				continue
			}
			if fragment == "" {
				continue
			}
			if info.IsDir() || !strings.HasSuffix(path, ".md") {
				t.Errorf("%s links to %s: a fragment of something that is not a Markdown page", page, target)
				continue
			}
			if !anchors(readPage(t, path))[fragment] {
				t.Errorf("%s links to %s: %s has no heading #%s", page, target, path, fragment)
			}
		}
	}
}

// The anchors follow GitHub's rules on the headings these pages use.
func TestDocsAnchors(t *testing.T) {
	got := anchors("# Storage: state across restarts\n```yaml\n# not-a-heading\n```\n## The journal: accepted means durable\n## Kubernetes: the Helm chart\n## Notes\n## Notes\n")
	for _, want := range []string{"storage-state-across-restarts", "the-journal-accepted-means-durable", "kubernetes-the-helm-chart", "notes", "notes-1"} {
		if !got[want] {
			t.Errorf("no anchor %q in %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a comment in a code fence counted as a heading")
	}
}

type podResources struct {
	Requests map[string]string `yaml:"requests"`
	Limits   map[string]string `yaml:"limits"`
}

// deployment is what the tests read of kubernetes/deployment.yaml: its
// containers' environment and resources.
type deployment struct {
	Spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Env []struct {
						Name  string `yaml:"name"`
						Value string `yaml:"value"`
					} `yaml:"env"`
					Resources podResources `yaml:"resources"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func readDeployment(t *testing.T) deployment {
	t.Helper()
	var d deployment
	readYAML(t, "kubernetes/deployment.yaml", &d)
	return d
}

// The resources the docs name are the manifest's and the chart's defaults.
func TestDocsNameTheManifestResources(t *testing.T) {
	deployment := readDeployment(t)
	if len(deployment.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("kubernetes/deployment.yaml: want one container, have %d", len(deployment.Spec.Template.Spec.Containers))
	}
	manifest := deployment.Spec.Template.Spec.Containers[0].Resources
	var values struct {
		Resources podResources `yaml:"resources"`
	}
	readYAML(t, "../charts/breach-exporter/values.yaml", &values)

	named := regexp.MustCompile("requests `cpu: (\\S+)`, `memory: (\\S+)`; limits `cpu: (\\S+)`,\\s+`memory: (\\S+)`")
	found := 0
	for _, page := range docPages(t) {
		for _, m := range named.FindAllStringSubmatch(readPage(t, page), -1) {
			found++
			doc := podResources{
				Requests: map[string]string{"cpu": m[1], "memory": m[2]},
				Limits:   map[string]string{"cpu": m[3], "memory": m[4]},
			}
			for source, want := range map[string]podResources{"kubernetes/deployment.yaml": manifest, "the chart's values.yaml": values.Resources} {
				if fmt.Sprint(doc) != fmt.Sprint(want) {
					t.Errorf("%s names resources %v; %s has %v", page, doc, source, want)
				}
			}
		}
	}
	if found == 0 {
		t.Error("no page names the kustomization's resources as \"requests `cpu: ...`, `memory: ...`; limits `cpu: ...`, `memory: ...`\"")
	}
}

// The memory limits the docs name are the examples': each form is checked
// against the file that uses it.
func TestDocsNameTheMemoryLimits(t *testing.T) {
	deployment := readDeployment(t)
	want := map[string]string{}
	for _, c := range deployment.Spec.Template.Spec.Containers {
		want["limits.memory: "] = c.Resources.Limits["memory"]
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				want["GOMEMLIMIT="] = e.Value
			}
		}
	}
	var compose struct {
		Services map[string]struct {
			MemLimit string `yaml:"mem_limit"`
		} `yaml:"services"`
	}
	readYAML(t, "compose.yaml", &compose)
	want["mem_limit: "] = compose.Services["breach_exporter"].MemLimit
	unit, err := os.ReadFile("breach_exporter.service")
	if err != nil {
		t.Fatal(err)
	}
	if m := regexp.MustCompile(`(?m)^MemoryMax=(\S+)$`).FindSubmatch(unit); m != nil {
		want["MemoryMax="] = string(m[1])
	}

	for form, value := range want {
		if value == "" {
			t.Errorf("the examples set no %s", form)
			continue
		}
		re := regexp.MustCompile("`(?:resources\\.)?" + regexp.QuoteMeta(form) + "([0-9A-Za-z]+)`")
		found := 0
		for _, page := range docPages(t) {
			for _, m := range re.FindAllStringSubmatch(readPage(t, page), -1) {
				found++
				if m[1] != value {
					t.Errorf("%s names %s%s; the examples set %s%s", page, form, m[1], form, value)
				}
			}
		}
		if found == 0 {
			t.Errorf("no page names the examples' `%s%s`", form, value)
		}
	}
}

// "about N KiB of RSS per address" is what bench/results.json measured: the
// growth of the built binary's peak RSS between its two largest address
// counts, divided by the addresses added.
func TestDocsRSSPerAddressIsTheMeasuredOne(t *testing.T) {
	data, err := os.ReadFile("../bench/results.json")
	if err != nil {
		t.Fatal(err)
	}
	var results struct {
		Deployed []struct {
			Addresses int `json:"addresses"`
			Ours      struct {
				PeakRSSBytes float64 `json:"peak_rss_bytes"`
			} `json:"ours"`
		} `json:"deployed"`
	}
	if err := json.Unmarshal(data, &results); err != nil {
		t.Fatal(err)
	}
	runs := results.Deployed
	if len(runs) < 2 {
		t.Fatalf("bench/results.json: %d deployed runs, want at least 2", len(runs))
	}
	a, b := runs[len(runs)-2], runs[len(runs)-1]
	if b.Addresses <= a.Addresses {
		t.Fatalf("bench/results.json: deployed runs not in increasing address counts: %d, %d", a.Addresses, b.Addresses)
	}
	measured := (b.Ours.PeakRSSBytes - a.Ours.PeakRSSBytes) / float64(b.Addresses-a.Addresses) / 1024

	named := regexp.MustCompile(`about\s+(\d+)\s+KiB\s+of\s+RSS\s+per\s+address`)
	found := 0
	for _, page := range docPages(t) {
		for _, m := range named.FindAllStringSubmatch(readPage(t, page), -1) {
			found++
			if m[1] != fmt.Sprint(math.Round(measured)) {
				t.Errorf("%s says about %s KiB of RSS per address; bench/results.json measured %.1f KiB", page, m[1], measured)
			}
		}
	}
	if found == 0 {
		t.Error("no page gives the RSS per address as \"about N KiB of RSS per address\"")
	}
	stale := regexp.MustCompile(`\d+ KB (?:of RSS )?per\s+address|RSS is about \d+ KB`)
	for _, page := range docPages(t) {
		if m := stale.FindString(readPage(t, page)); m != "" {
			t.Errorf("%s gives memory per address as %q: say \"about N KiB of RSS per address\", the measured figure", page, m)
		}
	}
}

// The intake rows of docs/sizing.md give the webhook figures of the run
// bench/results.json holds: accepted alerts a second (to the hundred),
// their baseline and the ratio (two decimals).
func TestDocsIntakeIsTheMeasuredOne(t *testing.T) {
	data, err := os.ReadFile("../bench/results.json")
	if err != nil {
		t.Fatal(err)
	}
	var results struct {
		Webhook struct {
			OursPerSecond      float64 `json:"ours_per_second"`
			BaselinePerSecond  float64 `json:"baseline_per_second"`
			DurablePerSecond   float64 `json:"durable_per_second"`
			Ratio              float64 `json:"ratio"`
			OursToDurableRatio float64 `json:"ours_to_durable_ratio"`
			DurableRatio       float64 `json:"durable_ratio"`
		} `json:"webhook"`
		Accounts struct {
			Many  float64 `json:"many_per_second"`
			One   float64 `json:"one_per_second"`
			Ratio float64 `json:"ratio"`
		} `json:"webhook_accounts"`
		Store struct {
			Store     float64 `json:"store_per_second"`
			Alone     float64 `json:"alone_per_second"`
			Forwarded float64 `json:"forwarded_per_second"`
			Ratio     float64 `json:"ratio"`
		} `json:"webhook_store"`
	}
	if err := json.Unmarshal(data, &results); err != nil {
		t.Fatal(err)
	}
	w, a, s := results.Webhook, results.Accounts, results.Store
	if w.OursPerSecond == 0 || w.BaselinePerSecond == 0 || w.DurablePerSecond == 0 || w.Ratio == 0 || w.OursToDurableRatio == 0 ||
		w.DurableRatio == 0 || a.Many == 0 || a.One == 0 || a.Ratio == 0 || s.Store == 0 || s.Alone == 0 || s.Ratio == 0 {
		t.Fatalf("bench/results.json lacks a webhook figure: %+v %+v %+v", w, a, s)
	}
	page := readPage(t, "../docs/sizing.md")
	for _, row := range []struct {
		starts         string  // the row's first cell starts so
		ours, baseline float64 // alerts a second
		ratio, ofFloor float64 // as the bench computed them (from its rounds); 0: not in the row
	}{
		{starts: "webhook: accepted alerts/s on loopback", ours: w.OursPerSecond, baseline: w.BaselinePerSecond, ratio: w.Ratio},
		{starts: "the same against the durable floor", ours: w.OursPerSecond, baseline: w.DurablePerSecond, ratio: w.OursToDurableRatio, ofFloor: w.DurableRatio},
		{starts: "webhook with 20 accounts", ours: a.Many, baseline: a.One, ratio: a.Ratio},
		{starts: "webhook: accepted alerts/s (204s) of one replica with the store", ours: s.Store, baseline: s.Alone, ratio: s.Ratio},
		{starts: "the same: alerts into the store's shared count", ours: s.Forwarded, baseline: s.Alone},
	} {
		cells := tableRow(t, page, row.starts)
		if got, want := cells[1], hundreds(row.ours); got != want {
			t.Errorf("sizing.md %q: ours %q, bench/results.json %s", row.starts, got, want)
		}
		if got, want := cells[2], hundreds(row.baseline); !strings.HasPrefix(got, want) {
			t.Errorf("sizing.md %q: baseline %q, bench/results.json %s", row.starts, got, want)
		}
		if row.ratio != 0 && !strings.Contains(cells[3], fmt.Sprintf("%.2f", row.ratio)) {
			t.Errorf("sizing.md %q: ratio %q, bench/results.json %.2f", row.starts, cells[3], row.ratio)
		}
		if row.ofFloor != 0 && !strings.Contains(cells[3], fmt.Sprintf("%.2f of the bare server", row.ofFloor)) {
			t.Errorf("sizing.md %q: %q does not give the floor as %.2f of the bare server", row.starts, cells[3], row.ofFloor)
		}
	}
}

// tableRow is the cells of the one table row of page whose first cell
// starts with starts, trimmed.
func tableRow(t *testing.T, page, starts string) []string {
	t.Helper()
	var found []string
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "| "+starts) {
			if found != nil {
				t.Fatalf("two rows start with %q", starts)
			}
			cells := strings.Split(strings.Trim(line, "|"), "|")
			for i := range cells {
				cells[i] = strings.TrimSpace(cells[i])
			}
			found = cells
		}
	}
	if len(found) < 4 {
		t.Fatalf("no row of four cells starts with %q", starts)
	}
	return found
}

// hundreds is n to the nearest hundred with a comma every three digits, as
// the tables write rates.
func hundreds(n float64) string {
	v := int(math.Round(n/100) * 100)
	s := fmt.Sprint(v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
