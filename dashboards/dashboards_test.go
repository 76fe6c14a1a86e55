// SPDX-License-Identifier: Apache-2.0

package dashboards

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/golden"
)

// The uids are fixed so that links and provisioning survive re-imports.
var wantUIDs = map[string]string{
	"breach-overview.json": "breach-overview",
	"exporter-health.json": "breach-exporter-health",
}

var wantVariables = map[string][]string{
	"breach-overview.json": {"datasource", "job", "instance", "account", "team", "address", "source"},
	"exporter-health.json": {"datasource", "job", "instance", "account", "team", "address"},
}

// allValues are the variables whose All is not ".+": an address without a
// team has team="" in the filter's join, and All must keep it.
var allValues = map[string]string{"team": ".*"}

// Grafana's own variables the queries may use.
var builtins = map[string]bool{"__rate_interval": true, "__range": true, "__range_s": true}

var (
	variableRef = regexp.MustCompile(`\$\{?(\w+)`)
	metricRef   = regexp.MustCompile(`\b(up|breach_[a-z0-9_]+|breach:[a-z_]+:threshold)\b(\{[^}]*\})?`)
)

type dashboard struct {
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	SchemaVersion int     `json:"schemaVersion"`
	Editable      *bool   `json:"editable"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"`
	Definition string          `json:"definition"`
	Datasource json.RawMessage `json:"datasource"`
	Multi      bool            `json:"multi"`
	IncludeAll bool            `json:"includeAll"`
	AllValue   string          `json:"allValue"`
}

type gridPos struct{ X, Y, W, H int }

// testPanel is the fuller view of a panel this test needs.
type testPanel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	GridPos    gridPos         `json:"gridPos"`
	Datasource json.RawMessage `json:"datasource"`
	Panels     []testPanel     `json:"panels"`
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
}

type dashboardFile struct {
	name string
	raw  []byte
}

func dashboardFiles(t *testing.T) []dashboardFile {
	t.Helper()
	names, err := fs.Glob(files, "*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(names) != len(wantUIDs) {
		t.Fatalf("dashboards %v, want one per %v", names, wantUIDs)
	}
	var out []dashboardFile
	for _, n := range names {
		raw, err := files.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, dashboardFile{n, raw})
	}
	return out
}

func TestDashboardHeader(t *testing.T) {
	for _, f := range dashboardFiles(t) {
		var d dashboard
		if err := json.Unmarshal(f.raw, &d); err != nil {
			t.Fatalf("%s: invalid JSON: %v", f.name, err)
		}
		if d.UID != wantUIDs[f.name] {
			t.Errorf("%s: uid %q, want %q", f.name, d.UID, wantUIDs[f.name])
		}
		if d.Title == "" {
			t.Errorf("%s: no title", f.name)
		}
		if d.SchemaVersion < 39 {
			t.Errorf("%s: schemaVersion %d, want 39 or later", f.name, d.SchemaVersion)
		}
		// Provisioned dashboards are changed in the repository, not in
		// Grafana, where a save would be lost at the next provisioning.
		if d.Editable == nil || *d.Editable {
			t.Errorf("%s: editable is not false", f.name)
		}
	}
}

func TestVariables(t *testing.T) {
	for _, f := range dashboardFiles(t) {
		var d dashboard
		if err := json.Unmarshal(f.raw, &d); err != nil {
			t.Fatal(err)
		}
		byName := map[string]variable{}
		for _, v := range d.Templating.List {
			byName[v.Name] = v
		}
		for _, name := range wantVariables[f.name] {
			v, ok := byName[name]
			if !ok {
				t.Errorf("%s: no variable %s", f.name, name)
				continue
			}
			if name == "datasource" {
				if v.Type != "datasource" || string(v.Query) != `"prometheus"` {
					t.Errorf("%s: datasource variable is %s over %s, want a datasource variable over prometheus", f.name, v.Type, v.Query)
				}
				continue
			}
			if v.Type != "query" {
				t.Errorf("%s: variable %s has type %s, want query", f.name, name, v.Type)
			}
			if !strings.HasPrefix(v.Definition, "label_values(") || string(v.Query) != fmt.Sprintf("%q", v.Definition) {
				t.Errorf("%s: variable %s: query %s, definition %q; want the same label_values()", f.name, name, v.Query, v.Definition)
			}
			if !isDatasourceVariable(v.Datasource) {
				t.Errorf("%s: variable %s uses datasource %s", f.name, name, v.Datasource)
			}
			// Every query variable offers several values and All, which
			// the queries use with =~ (so All must be a regular expression).
			all := cmp.Or(allValues[name], ".+")
			if !v.Multi || !v.IncludeAll || v.AllValue != all {
				t.Errorf("%s: variable %s: multi %v, includeAll %v, allValue %q; want a multi-value variable with All = %q",
					f.name, name, v.Multi, v.IncludeAll, v.AllValue, all)
			}
			if name != "job" && !strings.Contains(v.Definition, `job=~"$job"`) {
				t.Errorf("%s: variable %s: %q does not follow job=~\"$job\"", f.name, name, v.Definition)
			}
		}
	}
}

func TestPanels(t *testing.T) {
	for _, f := range dashboardFiles(t) {
		var d struct {
			dashboard
			Panels []testPanel `json:"panels"`
		}
		if err := json.Unmarshal(f.raw, &d); err != nil {
			t.Fatal(err)
		}
		defined := map[string]bool{}
		for _, v := range d.Templating.List {
			defined[v.Name] = true
		}
		ids := map[int]string{}
		var placed []testPanel
		var walk func([]testPanel)
		walk = func(panels []testPanel) {
			for _, p := range panels {
				where := fmt.Sprintf("%s: panel %d %q", f.name, p.ID, p.Title)
				if other, dup := ids[p.ID]; dup || p.ID == 0 {
					t.Errorf("%s: id not unique (also %q)", where, other)
				}
				ids[p.ID] = p.Title
				if p.GridPos.W <= 0 || p.GridPos.H <= 0 || p.GridPos.X+p.GridPos.W > 24 {
					t.Errorf("%s: bad gridPos %+v", where, p.GridPos)
				}
				for _, q := range placed {
					if overlap(p.GridPos, q.GridPos) {
						t.Errorf("%s overlaps panel %d %q", where, q.ID, q.Title)
					}
				}
				placed = append(placed, p)
				if p.Type == "row" {
					walk(p.Panels)
					continue
				}
				if !isDatasourceVariable(p.Datasource) {
					t.Errorf("%s: datasource %s, want ${datasource}", where, p.Datasource)
				}
				if len(p.Targets) == 0 {
					t.Errorf("%s: no targets", where)
				}
				refIDs := map[string]bool{}
				for _, tg := range p.Targets {
					if tg.RefID == "" || refIDs[tg.RefID] {
						t.Errorf("%s: refId %q empty or repeated", where, tg.RefID)
					}
					refIDs[tg.RefID] = true
					if strings.TrimSpace(tg.Expr) == "" {
						t.Errorf("%s/%s: no expr", where, tg.RefID)
					}
					if !isDatasourceVariable(tg.Datasource) {
						t.Errorf("%s/%s: datasource %s, want ${datasource}", where, tg.RefID, tg.Datasource)
					}
					for _, problem := range exprProblems(tg.Expr, defined) {
						t.Errorf("%s/%s: %s", where, tg.RefID, problem)
					}
				}
			}
		}
		walk(d.Panels)
	}
}

// processMetrics are the process collector's families a panel may read:
// main registers the collector on every exporter (the golden expositions
// hold the exporter's own families only). process_start_time_seconds
// picks the replica a partition (addresses by state) is read from.
var processMetrics = map[string]bool{"process_start_time_seconds": true}

// exprProblems lists unknown variables and metrics, and selectors that
// ignore the dashboard's job and instance.
func exprProblems(expr string, defined map[string]bool) []string {
	var problems []string
	for _, m := range variableRef.FindAllStringSubmatch(expr, -1) {
		if !defined[m[1]] && !builtins[m[1]] {
			problems = append(problems, fmt.Sprintf("unknown variable $%s", m[1]))
		}
	}
	for _, m := range metricRef.FindAllStringSubmatch(expr, -1) {
		if !golden.IsContractMetric(m[1]) && !processMetrics[m[1]] {
			problems = append(problems, fmt.Sprintf("%s is not a metric of the exporter's contract", m[1]))
		}
		// Every selector, the recorded thresholds included (they carry the
		// job and instance of each target), follows both variables; a
		// multi-value job needs =~.
		if !strings.Contains(m[2], `job=~"$job"`) || !strings.Contains(m[2], `instance=~"$instance"`) {
			problems = append(problems, fmt.Sprintf("%s does not select job=~\"$job\" and instance=~\"$instance\"", m[0]))
		}
	}
	return problems
}

// addressFilter is how a panel keeps the per-address series of the chosen
// accounts and teams: they carry neither, breach_address_info carries both
// (team="" for an address without one, which the team variable's All, .*,
// keeps). Where an exporter serves no breach_address_info
// (metrics.address_info: false), breach_address_state stands in, for the
// account alone. and never adds a series, so nothing is counted twice.
const addressFilter = `and on (job, instance, address) (breach_address_info{job=~"$job", instance=~"$instance", account=~"$account", team=~"$team"}` +
	` or on (job, instance, address) (breach_address_state{job=~"$job", instance=~"$instance", account=~"$account"}` +
	` unless on (job, instance) breach_address_info{job=~"$job", instance=~"$instance", account=~"$account"}))`

// filterProblems lists the selectors of expr that ignore the $account or
// $team variable: a series that carries account must select it, and every
// per-address one (breach_address_state too) must be filtered through
// addressFilter.
func filterProblems(expr string) []string {
	var problems []string
	for _, m := range metricRef.FindAllStringSubmatch(expr, -1) {
		if golden.CarriesLabel(m[1], "account") && !strings.Contains(m[2], `account=~"$account"`) {
			problems = append(problems, fmt.Sprintf("%s does not select account=~\"$account\"", m[0]))
		}
	}
	// The filter's own selectors are what the others are filtered by.
	const filtered = "\x00"
	outside := strings.ReplaceAll(expr, addressFilter, filtered)
	for _, m := range metricRef.FindAllStringSubmatch(outside, -1) {
		if !golden.CarriesLabel(m[1], "address") {
			continue
		}
		if !slices.ContainsFunc([]string{" ", " offset $__range ", "[$__rate_interval]) ", "[$__range]) "}, func(between string) bool {
			return strings.Contains(outside, m[0]+between+filtered)
		}) {
			problems = append(problems, fmt.Sprintf("%s is not filtered by the account and team (%s)", m[0], addressFilter))
		}
	}
	return problems
}

// Every panel follows the account and team variables; the fleet
// aggregates, which carry neither, say so in their description.
func TestPanelsFollowTheAccountAndTeam(t *testing.T) {
	if !golden.CarriesLabel("breach_api_up", "account") || !golden.CarriesLabel("breach_source_breaches", "address") || golden.CarriesLabel("breach_source_breaches", "account") {
		t.Fatal("golden.CarriesLabel does not see the labels of the golden expositions")
	}
	queries, err := Expressions()
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queries {
		for _, problem := range filterProblems(q.Expr) {
			t.Errorf("%s %q %s: %s", q.Dashboard, q.Panel, q.RefID, problem)
		}
		if strings.Contains(q.Expr, "breach_addresses") && !strings.Contains(q.Description, "team and account filters do not apply") {
			t.Errorf("%s %q: reads a fleet aggregate without saying the team and account filters do not apply", q.Dashboard, q.Panel)
		}
	}
}

func TestFilterProblemsCatchesUnfilteredSeries(t *testing.T) {
	for _, expr := range []string{
		`sum(breach_api_up{job=~"$job", instance=~"$instance"})`,
		`max by (address) (breach_source_breaches{job=~"$job", instance=~"$instance", address=~"$address"})`,
		`max by (address) (breach_address_state{job=~"$job", instance=~"$instance", address=~"$address"})`,
		// The account alone: the team is not followed.
		`max by (address) (breach_address_state{job=~"$job", instance=~"$instance", address=~"$address", account=~"$account"})`,
		`max by (address) (breach_source_breaches{job=~"$job", instance=~"$instance", address=~"$address"} and on (job, instance, address) breach_address_state{job=~"$job", instance=~"$instance", account=~"$account"})`,
	} {
		if len(filterProblems(expr)) == 0 {
			t.Errorf("filterProblems(%s) found nothing", expr)
		}
	}
	good := `max by (address) (breach_source_breaches{job=~"$job", instance=~"$instance", address=~"$address"} ` + addressFilter + `)`
	if p := filterProblems(good); len(p) > 0 {
		t.Errorf("problems in a good query: %v", p)
	}
}

// The check itself must catch what the dashboard linter caught.
func TestExprProblemsCatchesMissingSelectors(t *testing.T) {
	defined := map[string]bool{"job": true, "instance": true}
	for _, expr := range []string{
		`max(breach_refresh_cycle_seconds{job="$job", instance=~"$instance"})`, // single-value job
		`max(breach_refresh_cycle_seconds{job=~"$job"})`,                       // no instance
		`sum(rate(breach_api_requests_total[5m]))`,                             // no selector at all
		`max(breach_refresh_cycle_seconds{job=~"$job", instance=~"$instance"}) * scalar(breach:stale_refresh_rounds:threshold)`,
		`up{job=~"$job", instance=~"$instance", address=~"$address"}`, // undefined variable
	} {
		if len(exprProblems(expr, defined)) == 0 {
			t.Errorf("no problem found in %s", expr)
		}
	}
	if p := exprProblems(`max(breach_refresh_cycle_seconds{job=~"$job", instance=~"$instance"} * on (job, instance) breach:stale_refresh_rounds:threshold{job=~"$job", instance=~"$instance"})`, defined); len(p) > 0 {
		t.Errorf("problems in a good query: %v", p)
	}
}

// No datasource anywhere may name a concrete data source: a hard-coded uid
// breaks the first import into any other Grafana.
func TestEveryDatasourceIsTheVariable(t *testing.T) {
	for _, f := range dashboardFiles(t) {
		var doc interface{}
		if err := json.Unmarshal(f.raw, &doc); err != nil {
			t.Fatal(err)
		}
		count := 0
		var walk func(path string, v interface{})
		walk = func(path string, v interface{}) {
			switch v := v.(type) {
			case map[string]interface{}:
				for k, child := range v {
					if k == "datasource" {
						count++
						raw, _ := json.Marshal(child)
						if !isDatasourceVariable(raw) {
							t.Errorf("%s: %s.datasource is %s", f.name, path, raw)
						}
						continue
					}
					walk(path+"."+k, child)
				}
			case []interface{}:
				for i, child := range v {
					walk(fmt.Sprintf("%s[%d]", path, i), child)
				}
			}
		}
		walk("", doc)
		if count == 0 {
			t.Errorf("%s: no datasource reference at all", f.name)
		}
	}
}

// Every panel works on the default families: a query that reads a detail
// family belongs to a panel whose description says it needs it (and shows
// no data without it).
func TestDetailFamiliesAreMarked(t *testing.T) {
	queries, err := Expressions()
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, q := range queries {
		for _, m := range metricRef.FindAllStringSubmatch(q.Expr, -1) {
			if !golden.IsDetailFamily(m[1]) {
				continue
			}
			if !q.NeedsDetail(m[1]) {
				t.Errorf("%s %q/%s reads the detail family %s; its description must say \"needs detail family %s\"", q.Dashboard, q.Panel, q.RefID, m[1], m[1])
			}
			marked++
		}
	}
	if marked == 0 {
		t.Error("no panel reads a detail family: the check checks nothing")
	}
	if (Query{Description: "Databases per address."}).NeedsDetail("breach_source_databases") {
		t.Error("a description that does not say so counts as marked")
	}
}

func TestExpressionsListsEveryTarget(t *testing.T) {
	queries, err := Expressions()
	if err != nil {
		t.Fatal(err)
	}
	targets := 0
	for _, f := range dashboardFiles(t) {
		targets += strings.Count(string(f.raw), `"refId"`)
	}
	if len(queries) != targets {
		t.Errorf("Expressions() returned %d queries, the files have %d targets", len(queries), targets)
	}
	for _, q := range queries {
		if q.Dashboard == "" || q.Panel == "" || q.RefID == "" || q.Expr == "" {
			t.Errorf("incomplete query %+v", q)
		}
	}
}

func isDatasourceVariable(raw json.RawMessage) bool {
	var ds struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	if err := json.Unmarshal(raw, &ds); err != nil {
		return false
	}
	return ds.Type == "prometheus" && ds.UID == "${datasource}"
}

func overlap(a, b gridPos) bool {
	return a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H
}

// detailPanel is what TestNoBlankPanels reads of a panel: its targets,
// its no-value text and, for tables, how columns are named and mapped.
type detailPanel struct {
	ID          int            `json:"id"`
	Type        string         `json:"type"`
	Title       string         `json:"title"`
	Panels      []detailPanel  `json:"panels"`
	Targets     []detailTarget `json:"targets"`
	FieldConfig struct {
		Defaults struct {
			NoValue string `json:"noValue"`
		} `json:"defaults"`
		Overrides []struct {
			Matcher struct {
				ID      string `json:"id"`
				Options string `json:"options"`
			} `json:"matcher"`
			Properties []struct {
				ID    string          `json:"id"`
				Value json.RawMessage `json:"value"`
			} `json:"properties"`
		} `json:"overrides"`
	} `json:"fieldConfig"`
	Transformations []struct {
		ID      string `json:"id"`
		Options struct {
			RenameByName map[string]string `json:"renameByName"`
		} `json:"options"`
	} `json:"transformations"`
}

type detailTarget struct {
	RefID string `json:"refId"`
	Expr  string `json:"expr"`
}

func readsDetail(expr string) bool {
	for _, m := range metricRef.FindAllStringSubmatch(expr, -1) {
		if golden.IsDetailFamily(m[1]) {
			return true
		}
	}
	return false
}

// switchOn is where a person switches a detail family on; every text that
// explains an empty panel or column names it with the family.
const switchOn = "metrics.detail_families"

// blankPanelProblems holds a panel to "data on the default families, or a
// text that says why not", statically, by the metrics its targets read:
//
//   - a target that reads only detail families returns nothing on the
//     default families. Every target of its panel must be such a target
//     (otherwise the panel shows the others' data and the missing part goes
//     unexplained), and the panel's noValue, which Grafana shows instead of
//     "No data", must name each family and switchOn;
//   - a target that reads a detail family and a default one is a table
//     column with a fallback: "or <default family> * NaN" gives a NaN cell
//     for each row the family does not serve, and the column (the name the
//     organize transformation gives "Value #<refId>") must map NaN to a
//     text that names the family and switchOn.
func blankPanelProblems(p detailPanel) []string {
	where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
	var problems []string
	emptyTargets := 0
	for _, tg := range p.Targets {
		var detail []string
		defaults := 0
		// The address filter only keeps series: it gives no row of its
		// own, so it is not a default family's data.
		for _, m := range metricRef.FindAllStringSubmatch(strings.ReplaceAll(tg.Expr, addressFilter, ""), -1) {
			if golden.IsDetailFamily(m[1]) {
				if !slices.Contains(detail, m[1]) {
					detail = append(detail, m[1])
				}
			} else {
				defaults++
			}
		}
		switch {
		case len(detail) == 0:
		case defaults == 0:
			emptyTargets++
			for _, family := range detail {
				if nv := p.FieldConfig.Defaults.NoValue; !strings.Contains(nv, family) || !strings.Contains(nv, switchOn) {
					problems = append(problems, fmt.Sprintf("%s/%s reads only %s, so it is empty on the default families: the panel's noValue %q must name it and %s", where, tg.RefID, family, nv, switchOn))
				}
			}
		default:
			if !strings.Contains(tg.Expr, "* NaN") {
				problems = append(problems, fmt.Sprintf("%s/%s reads %v and a default family but has no \"* NaN\" fallback", where, tg.RefID, detail))
			}
			column := p.columnName(tg.RefID)
			text := p.nanText(column)
			for _, family := range detail {
				if !strings.Contains(text, family) || !strings.Contains(text, switchOn) {
					problems = append(problems, fmt.Sprintf("%s/%s: column %q maps NaN to %q; it must name %s and %s", where, tg.RefID, column, text, family, switchOn))
				}
			}
		}
	}
	if emptyTargets > 0 && emptyTargets < len(p.Targets) {
		problems = append(problems, fmt.Sprintf("%s: %d of its %d targets read only detail families: give them a NaN fallback or a panel of their own", where, emptyTargets, len(p.Targets)))
	}
	return problems
}

// columnName is the name the panel's organize transformation gives the
// values of target refID.
func (p detailPanel) columnName(refID string) string {
	for _, t := range p.Transformations {
		if name, ok := t.Options.RenameByName["Value #"+refID]; ok && t.ID == "organize" {
			return name
		}
	}
	return "Value #" + refID
}

// nanText is the text a special "nan" value mapping of column shows, "" for
// none.
func (p detailPanel) nanText(column string) string {
	for _, o := range p.FieldConfig.Overrides {
		if o.Matcher.ID != "byName" || o.Matcher.Options != column {
			continue
		}
		for _, prop := range o.Properties {
			if prop.ID != "mappings" {
				continue
			}
			var mappings []struct {
				Type    string `json:"type"`
				Options struct {
					Match  string `json:"match"`
					Result struct {
						Text string `json:"text"`
					} `json:"result"`
				} `json:"options"`
			}
			if err := json.Unmarshal(prop.Value, &mappings); err != nil {
				return ""
			}
			for _, m := range mappings {
				if m.Type == "special" && m.Options.Match == "nan" {
					return m.Options.Result.Text
				}
			}
		}
	}
	return ""
}

// No blank panel on the default families: every panel or column that
// needs a detail family says which and how to switch it on.
func TestNoBlankPanels(t *testing.T) {
	checked := 0
	for _, f := range dashboardFiles(t) {
		var d struct {
			Panels []detailPanel `json:"panels"`
		}
		if err := json.Unmarshal(f.raw, &d); err != nil {
			t.Fatal(err)
		}
		var walk func([]detailPanel)
		walk = func(panels []detailPanel) {
			for _, p := range panels {
				walk(p.Panels)
				problems := blankPanelProblems(p)
				for _, problem := range problems {
					t.Errorf("%s: %s", f.name, problem)
				}
				if slices.ContainsFunc(p.Targets, func(tg detailTarget) bool { return readsDetail(tg.Expr) }) {
					checked++
				}
			}
		}
		walk(d.Panels)
	}
	// The overview's four detail panels and its exposure table.
	if checked < 5 {
		t.Errorf("only %d panels explain a detail family; the check found nothing to check", checked)
	}
}

// The check catches each way a panel can be blank or unexplained.
func TestBlankPanelProblemsCatches(t *testing.T) {
	const sel = `{job=~\"$job\"}` // as it stands in JSON
	panel := func(js string) detailPanel {
		var p detailPanel
		if err := json.Unmarshal([]byte(js), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	table := func(mapping string) string {
		return `{"id": 1, "title": "t", "type": "table",
			"targets": [{"refId": "A", "expr": "max by (address, source) (breach_source_breaches` + sel + `)"},
			            {"refId": "B", "expr": "max by (address, source) (breach_source_databases` + sel + `) or max by (address, source) (breach_source_breaches` + sel + `) * NaN"}],
			"transformations": [{"id": "organize", "options": {"renameByName": {"Value #B": "Databases"}}}],
			"fieldConfig": {"defaults": {}, "overrides": [{"matcher": {"id": "byName", "options": "Databases"},
				"properties": [{"id": "mappings", "value": [` + mapping + `]}]}]}}`
	}
	good := []string{
		`{"id": 1, "title": "s", "targets": [{"refId": "A", "expr": "count(breach_source_database_info` + sel + `)"}],
		  "fieldConfig": {"defaults": {"noValue": "Needs breach_source_database_info: add it to metrics.detail_families"}}}`,
		table(`{"type": "special", "options": {"match": "nan", "result": {"text": "off: add breach_source_databases to metrics.detail_families"}}}`),
		`{"id": 1, "title": "plain", "targets": [{"refId": "A", "expr": "max(breach_source_breaches` + sel + `)"}]}`,
	}
	for _, js := range good {
		if problems := blankPanelProblems(panel(js)); len(problems) > 0 {
			t.Errorf("problems in a good panel: %v", problems)
		}
	}
	bad := []string{
		// No noValue.
		`{"id": 1, "title": "s", "targets": [{"refId": "A", "expr": "count(breach_source_database_info` + sel + `)"}]}`,
		// A noValue that does not say how to switch the family on.
		`{"id": 1, "title": "s", "targets": [{"refId": "A", "expr": "count(breach_source_database_info` + sel + `)"}],
		  "fieldConfig": {"defaults": {"noValue": "Needs breach_source_database_info"}}}`,
		// A detail-only target beside one with data: its part goes unexplained.
		`{"id": 1, "title": "s", "targets": [{"refId": "A", "expr": "count(breach_source_database_info` + sel + `)"},
		  {"refId": "B", "expr": "max(breach_source_breaches` + sel + `)"}],
		  "fieldConfig": {"defaults": {"noValue": "Needs breach_source_database_info: add it to metrics.detail_families"}}}`,
		// A column whose NaN mapping names another family.
		table(`{"type": "special", "options": {"match": "nan", "result": {"text": "off: add breach_source_field_exposed to metrics.detail_families"}}}`),
		// A column without a NaN mapping.
		table(`{"type": "special", "options": {"match": "null", "result": {"text": "off: add breach_source_databases to metrics.detail_families"}}}`),
	}
	for i, js := range bad {
		if problems := blankPanelProblems(panel(js)); len(problems) == 0 {
			t.Errorf("bad panel %d: no problem found", i)
		}
	}
}
