// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/examples/simulator/sim"
)

// The demo's pace at Alertmanager, so that an acknowledgement rehearsed in
// the demo stays closed: 15 minutes of `make demo`,
// scaled. The simulator sweeps every demoTestSweep where demo.sh sweeps
// every SWEEP (15s), so demoRun of demo time is a fixed number of sweeps
// (60) in about a minute. The rules are the shipped file itself, not the
// e2e's shortened copy: every window of BreachCredentialsExposed is longer
// than the demo run at either time scale, so the shipped rules give within
// the run what they would give over 15 real minutes.
const (
	demoRun       = 15 * time.Minute
	demoTestSweep = time.Second
	// demoSettle bounds how long after the last counted sweep the exporter,
	// Prometheus and Alertmanager may take to show every exposure: the
	// exporter reads the API at its 55 requests a minute in real time.
	demoSettle = 90 * time.Second
	// demoRateLimit is the simulator's --rate-limit: the service's 60
	// requests a minute, which the exporter keeps to (55), and as many for
	// the test's own reads with the same key, which demo.sh has no need of.
	demoRateLimit = "120"
)

// demoPair is one address and feed: one exposure, one page.
type demoPair struct{ address, source string }

func (p demoPair) String() string { return p.address + "/" + p.source }

// TestDemoPaceOnePagePerExposure runs the simulator as examples/demo.sh does
// (its flags, --sweep.hold-exposed among them; only addresses, files, the
// sweep interval and a rate limit with room for the test's reads are the
// test's), the exporter, and Prometheus and
// Alertmanager from the shipped examples and rules, for 15 minutes of demo
// time. At every look Alertmanager holds at most one active critical alert
// per address and feed; after the run every feed the simulator shows with
// a plaintext password has exactly one, and each active one has a cause in
// the simulator (the password exposed in that feed); and the on-call
// receiver was paged at most once per address and feed.
func TestDemoPaceOnePagePerExposure(t *testing.T) {
	root := repoRoot(t)
	examples := filepath.Join(root, "examples")
	dir := t.TempDir()
	demoFlags, demoSweep := demoSimulatorFlags(t, filepath.Join(examples, "demo.sh"))
	sweeps := int(demoRun / demoSweep)

	prometheusBin, alertmanagerBin, exporterBin, simulatorBin := programs(t, root, dir)
	ctx := testContext(t, runTimeout)

	addrs := freeAddrs(t, 7)
	simAddr, webAddr, hookAddr, promAddr, amAddr, smtpAddr, adminAddr := addrs[0], addrs[1], addrs[2], addrs[3], addrs[4], addrs[5], addrs[6]
	s := &stack{
		dir: dir, prom: promAPI{base: "http://" + promAddr}, am: amAPI{base: "http://" + amAddr},
		receiver: newReceiver(t), webAddr: webAddr, hookAddr: hookAddr, admin: "http://" + adminAddr,
		exporterBin: exporterBin, exporterFile: filepath.Join(dir, "breach_exporter.yml"),
	}
	s.exporter = exporterConfig(t, examples, s.exporterFile, simAddr)
	s.prometheusFile = filepath.Join(dir, "prometheus.yml")
	shipped := filepath.Join(root, "alerts", "breach_exporter.rules.yml")
	prometheusConfig(t, examples, s.prometheusFile, []string{webAddr}, amAddr, shipped)
	alertmanagerFile := filepath.Join(dir, "alertmanager.yml")
	alertmanagerConfig(t, examples, alertmanagerFile, s.receiver.server.Listener.Addr().String(), smtpAddr)

	s.start(t, dir, "alertmanager", alertmanagerBin,
		"--config.file="+alertmanagerFile,
		"--storage.path="+filepath.Join(dir, "alertmanager-data"),
		"--web.listen-address="+amAddr,
		"--cluster.listen-address=")
	s.start(t, dir, "prometheus", prometheusBin,
		"--config.file="+s.prometheusFile,
		"--storage.tsdb.path="+filepath.Join(dir, "prometheus-data"),
		"--web.listen-address="+promAddr)
	s.waitReady(ctx, t, "alertmanager", s.am.base+"/-/ready")
	s.waitReady(ctx, t, "prometheus", s.prom.base+"/-/ready")
	simArgs := demoFlags.args(t, map[string]string{
		"web.listen-address":   simAddr,
		"admin.listen-address": adminAddr,
		"api.token-file":       s.exporter.tokenFile,
		"webhook.url":          "http://" + hookAddr + "/webhook",
		"webhook.secret-file":  s.exporter.secretFile,
		"sweep.interval":       demoTestSweep.String(),
	})
	s.start(t, dir, "simulator", simulatorBin, append(simArgs, "--rate-limit="+demoRateLimit)...)
	s.waitReady(ctx, t, "simulator", "http://"+simAddr+"/openapi.json")
	s.setUpSubject(ctx, t) // exporterConfig watches it; it never exposes a password
	s.startExporter(ctx, t, "exporter")
	if !t.Run("prometheus scrapes the exporter", func(t *testing.T) { s.targetUp(ctx, t) }) {
		return
	}

	simLog := s.process("simulator").logPath
	var produced int
	s.eventually(ctx, t, fmt.Sprintf("%d sweeps (%s of demo time), at most one critical alert per feed at every look", sweeps, demoRun),
		time.Duration(sweeps)*demoTestSweep+startupTimeout, func(ctx context.Context) error {
			if _, err := s.demoCritical(ctx); err != nil {
				return err
			}
			done, alerts, err := demoSweepsDone(simLog)
			if err != nil {
				return permanent{err}
			}
			if done < sweeps {
				return fmt.Errorf("%d of %d sweeps done", done, sweeps)
			}
			produced = alerts
			return nil
		})

	var exposures map[demoPair]bool
	s.eventually(ctx, t, "the simulator's exposures", startupTimeout, func(ctx context.Context) (err error) {
		exposures, err = s.demoExposures(ctx)
		return err
	})
	var exposed []demoPair // in plaintext: the exporter's plaintext exposure pages
	for p, plaintext := range exposures {
		if plaintext {
			exposed = append(exposed, p)
		}
	}
	if len(exposed) == 0 {
		t.Fatalf("after %s of demo time the simulator shows no plaintext password: nothing to page for", demoRun)
	}
	s.eventually(ctx, t, "one active critical alert and one page for every exposed feed", demoSettle, func(ctx context.Context) error {
		active, err := s.demoCritical(ctx)
		if err != nil {
			return err
		}
		pages, err := s.demoPages()
		if err != nil {
			return err
		}
		var missing []string
		for _, p := range exposed {
			if active[p] == 0 || pages[p] == 0 {
				missing = append(missing, fmt.Sprintf("%s (%d active, %d pages)", p, active[p], pages[p]))
			}
		}
		if len(missing) > 0 {
			slices.Sort(missing)
			return fmt.Errorf("not yet alerted and paged: %v", missing)
		}
		return nil
	})

	// Every critical alert still active has its cause in the simulator: the
	// feed exposes the password. Read again, as sweeps go on.
	active, err := s.demoCritical(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var now map[demoPair]bool
	s.eventually(ctx, t, "the simulator's exposures", startupTimeout, func(ctx context.Context) (err error) {
		now, err = s.demoExposures(ctx)
		return err
	})
	for p := range active {
		if _, ok := now[p]; !ok {
			t.Errorf("critical alert for %s, but the simulator's feed exposes no password", p)
		}
	}
	got, _ := s.receiver.notifications()
	t.Logf("%s of demo time in %d sweeps of %s: %d alerts produced by the simulator; %d feeds with a plaintext password; "+
		"%d active critical alerts at Alertmanager; %d notifications to the receivers",
		demoRun, sweeps, demoTestSweep, produced, len(exposed), len(active), len(got))
}

// demoFlags are the simulator's flags in demo.sh: name to value, "" for a
// flag given without one.
type demoFlags map[string]string

// demoSimulatorFlags reads how examples/demo.sh starts the simulator: its
// flags, and the sweep interval it defaults to. The demo must hold exposed
// feeds, or an acknowledged exposure would not stay closed.
func demoSimulatorFlags(t *testing.T, script string) (demoFlags, time.Duration) {
	t.Helper()
	data, err := os.ReadFile(script)
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	m := regexp.MustCompile(`(?m)^SWEEP=\$\{SWEEP:-(\w+)\}$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s sets no default SWEEP=${SWEEP:-...}", script)
	}
	sweep, err := time.ParseDuration(m[1])
	if err != nil || sweep <= 0 || demoRun%sweep != 0 {
		t.Fatalf("%s: SWEEP default %q is not a positive divisor of %s (%v)", script, m[1], demoRun, err)
	}
	// The command runs from the line naming the binary to the one ending in &.
	block := regexp.MustCompile(`(?ms)^\./breach_simulator \\\n(.*?)&$`).FindStringSubmatch(text)
	if block == nil {
		t.Fatalf("%s: no ./breach_simulator command ending in &", script)
	}
	flags := demoFlags{}
	for line := range strings.Lines(block[1]) {
		arg := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), `\`))
		if arg == "" {
			continue
		}
		name, value, _ := strings.Cut(strings.TrimPrefix(arg, "--"), "=")
		if !strings.HasPrefix(arg, "--") || name == "" {
			t.Fatalf("%s: simulator argument %q is not a --flag", script, arg)
		}
		if unquoted, err := strconv.Unquote(value); err == nil {
			value = unquoted
		}
		flags[name] = value
	}
	if _, ok := flags["sweep.hold-exposed"]; !ok {
		t.Fatalf("%s does not run the simulator with --sweep.hold-exposed: %v", script, flags)
	}
	return flags, sweep
}

// args are the demo's flags with the test's values where it sets one. A
// value of the script's own (a shell variable) the test does not replace
// would not mean the same here.
func (f demoFlags) args(t *testing.T, test map[string]string) []string {
	t.Helper()
	var args []string
	for _, name := range slices.Sorted(maps.Keys(f)) {
		value, ok := test[name]
		switch {
		case ok:
		case strings.Contains(f[name], "$"):
			t.Fatalf("demo.sh gives the simulator --%s=%s, which the test does not set", name, f[name])
		default:
			value = f[name]
		}
		if value == "" {
			args = append(args, "--"+name)
		} else {
			args = append(args, "--"+name+"="+value)
		}
	}
	for name := range test {
		if _, ok := f[name]; !ok {
			t.Fatalf("the test sets --%s, which demo.sh does not give the simulator", name)
		}
	}
	return args
}

// sweepDone is the simulator's log line after each sweep (sim.Run).
var sweepDone = regexp.MustCompile(`(?m)msg="sweep done" alerts=(\d+)`)

// demoSweepsDone counts the sweeps the simulator logged and the alerts
// they produced.
func demoSweepsDone(logPath string) (sweeps, alerts int, err error) {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return 0, 0, err
	}
	for _, m := range sweepDone.FindAllSubmatch(data, -1) {
		n, err := strconv.Atoi(string(m[1]))
		if err != nil {
			return 0, 0, err
		}
		sweeps, alerts = sweeps+1, alerts+n
	}
	return sweeps, alerts, nil
}

// demoCritical counts Alertmanager's active (neither silenced nor
// inhibited) critical alerts per address and feed; two for one feed is a
// permanent error.
func (s *stack) demoCritical(ctx context.Context) (map[demoPair]int, error) {
	held, err := s.am.alerts(ctx)
	if err != nil {
		return nil, err
	}
	active := map[demoPair]int{}
	var twice []string
	for _, a := range held {
		if a.Status.State != "active" || a.Labels["severity"] != "critical" {
			continue
		}
		p := demoPair{a.Labels["address"], a.Labels["source"]}
		if active[p]++; active[p] == 2 {
			twice = append(twice, p.String())
		}
	}
	if len(twice) > 0 {
		var alerts []string
		for _, a := range held {
			if slices.Contains(twice, demoPair{a.Labels["address"], a.Labels["source"]}.String()) {
				alerts = append(alerts, fmt.Sprintf("%s %v", a.Status.State, a.Labels))
			}
		}
		return nil, permanent{fmt.Errorf("Alertmanager holds more than one active critical alert for %v: %v", twice, alerts)}
	}
	return active, nil
}

// demoPages counts the receiver's on-call pages per address and feed.
func (s *stack) demoPages() (map[demoPair]int, error) {
	got, malformed := s.receiver.notifications()
	if len(malformed) > 0 {
		return nil, permanent{fmt.Errorf("undecodable notifications: %v", malformed)}
	}
	return countPages(got)
}

// countPages counts the pages per address and feed in notifications, in
// the order received. Alertmanager sends a group (an address) again
// whenever it changes, with every alert still firing in it; a page for a
// feed is a notification that carries its critical alert firing when the
// group's notification before did not (the first, or one after it
// resolved). A feed paged twice, or under two alert names, is a permanent
// error.
func countPages(got []notification) (map[demoPair]int, error) {
	before := map[string]map[demoPair]bool{} // group: feeds firing in its last notification
	pages := map[demoPair]int{}
	names := map[demoPair]string{}
	var errs []string
	for _, n := range got {
		group := n.Receiver + fmt.Sprint(n.GroupLabels)
		firing := map[demoPair]bool{}
		for _, a := range n.Alerts {
			if a.Status != "firing" || a.Labels["severity"] != "critical" {
				continue
			}
			p := demoPair{a.Labels["address"], a.Labels["source"]}
			if name, seen := names[p]; seen && name != a.Labels["alertname"] {
				errs = append(errs, fmt.Sprintf("%s paged as %s and %s", p, name, a.Labels["alertname"]))
			}
			names[p] = a.Labels["alertname"]
			firing[p] = true
			if !before[group][p] {
				if pages[p]++; pages[p] == 2 {
					errs = append(errs, p.String()+" paged twice")
				}
			}
		}
		before[group] = firing
	}
	if len(errs) > 0 {
		return nil, permanent{fmt.Errorf("%s; notifications: %+v", strings.Join(errs, "; "), got)}
	}
	return pages, nil
}

// demoExposures lists the feeds the simulator shows exposing the password
// (the causes of its critical alerts: the password field or a plaintext
// password), over the demo's verified addresses; true where in plaintext.
func (s *stack) demoExposures(ctx context.Context) (map[demoPair]bool, error) {
	exposed := map[demoPair]bool{}
	for _, a := range sim.DefaultAddresses() {
		if !a.Verified {
			continue
		}
		feeds, err := s.simulatorFeeds(ctx, a.Email)
		if err != nil {
			return nil, err
		}
		for _, f := range feeds {
			if f.HasPlaintextPassword || slices.Contains(f.FieldsExposed, "password") {
				exposed[demoPair{a.Email, f.Source}] = f.HasPlaintextPassword
			}
		}
	}
	return exposed, nil
}

// countPages tells a page from a notification that repeats a firing alert,
// and finds a feed paged again after it resolved or under a second alert.
func TestCountPages(t *testing.T) {
	alert := func(status, name, source string) string {
		return fmt.Sprintf(`{"status": %q, "labels": {"alertname": %q, "severity": "critical", "address": "a@example.com", "source": %q}}`,
			status, name, source)
	}
	parse := func(alerts ...string) notification {
		var n notification
		body := `{"receiver": "security-oncall", "groupLabels": {"address": "a@example.com"}, "alerts": [` + strings.Join(alerts, ",") + `]}`
		if err := json.Unmarshal([]byte(body), &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	const name = "BreachCredentialsExposed"
	index, archive := demoPair{"a@example.com", "index"}, demoPair{"a@example.com", "archive"}
	// A second feed joins the group: the first is carried again, not paged.
	pages, err := countPages([]notification{
		parse(alert("firing", name, "index")),
		parse(alert("firing", name, "index"), alert("firing", name, "archive")),
	})
	if err != nil || pages[index] != 1 || pages[archive] != 1 {
		t.Errorf("a feed joining the group: pages %v, %v; want one each", pages, err)
	}
	for _, c := range []struct {
		what, want string
		got        []notification
	}{
		{"paged again after it resolved", "a@example.com/index paged twice", []notification{
			parse(alert("firing", name, "index")),
			parse(alert("resolved", name, "index")),
			parse(alert("firing", name, "index")),
		}},
		{"paged under a second alert", "paged as " + name + " and BreachCriticalAlertReceived", []notification{
			parse(alert("firing", name, "index"), alert("firing", "BreachCriticalAlertReceived", "index")),
		}},
	} {
		if pages, err := countPages(c.got); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: pages %v, error %v; want an error saying %q", c.what, pages, err, c.want)
		}
	}
}
