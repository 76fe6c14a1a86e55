// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

const (
	// jobName is the scrape job the rules and dashboards select.
	jobName = "breach"
	// criticalReceiver is where examples/alertmanager.yml routes severity="critical".
	criticalReceiver = "security-oncall"

	// buildTimeout allows for a cold build cache on a slow machine;
	// runTimeout bounds everything after the builds. cleanupMargin is kept
	// before go test's own -timeout so that processes are always stopped.
	buildTimeout  = 4 * time.Minute
	runTimeout    = 8 * time.Minute
	cleanupMargin = 30 * time.Second
	pollInterval  = 250 * time.Millisecond

	// With seed 1 the simulator starts with a plaintext password exposed and
	// its first sweep already sends critical alerts. Each alert makes the
	// exporter re-read its address ahead of the round, so sweeps must leave
	// room in the 55 requests a minute for the addresses never read yet:
	// at 2s they take the whole budget and two addresses stay pending.
	simulatorSeed  = "1"
	sweepInterval  = "10s"
	startupTimeout = 30 * time.Second
	dataTimeout    = 90 * time.Second
	alertTimeout   = 120 * time.Second
)

var feeds = []string{"archive", "combolist", "index", "enriched"}

// stack is the running system under test.
type stack struct {
	dir      string
	mu       sync.Mutex // guards procs: the exporter is restarted
	procs    []*process
	prom     promAPI
	am       amAPI
	receiver *receiver
	exporter exporterSetup
	owners   []ownerSource // the sources of owner labels (owners_test.go)
	webAddr  string        // the exporter's metrics listener, its instance label
	hookAddr string        // the exporter's webhook listener
	admin    string        // the simulator's test controls, http://host:port

	exporterBin, exporterFile string
	prometheusFile            string
	exporterName              string // the running exporter's process name; guarded by mu
	// exporterArgs are more flags of the exporter; login is what its web
	// listener asks for, nil for nothing (startStack).
	exporterArgs []string
	login        *url.Userinfo
}

// TestEndToEnd runs the simulator, the exporter, Prometheus and Alertmanager
// together from the shipped examples, and checks what users rely on: the
// target is scraped, every rule and dashboard query works, the core panels
// show data, and critical alerts reach the receiver with their labels.
func TestEndToEnd(t *testing.T) {
	ctx, s := startStack(t, nil)
	root := repoRoot(t)
	if !t.Run("prometheus scrapes the exporter", func(t *testing.T) { s.targetUp(ctx, t) }) {
		return
	}
	t.Run("every rule loads and evaluates", func(t *testing.T) { s.rulesHealthy(ctx, t) })
	t.Run("critical alerts reach the receiver", func(t *testing.T) { s.criticalAlertsDelivered(ctx, t) })
	t.Run("core panels show data", func(t *testing.T) { s.corePanelsHaveData(ctx, t) })
	t.Run("the demo raises only its expected alerts", func(t *testing.T) { s.onlyExpectedAlerts(ctx, t) })
	t.Run("every dashboard query evaluates", func(t *testing.T) { s.dashboardQueriesEvaluate(ctx, t) })
	t.Run("every rule expression evaluates", func(t *testing.T) { s.ruleExpressionsEvaluate(ctx, t) })
	t.Run("every alert fires and resolves", func(t *testing.T) { s.everyAlertFiresAndResolves(ctx, t) })
	// After the owners' scenarios: before them, no address has a team.
	t.Run("every dashboard variable lists values", func(t *testing.T) { s.dashboardVariablesList(ctx, t, root) })
}

// startStack starts the simulator, the exporter, Prometheus and
// Alertmanager from the shipped examples, on loopback, and waits until
// each is ready. With login, the exporter's web listener asks for it
// (basic auth in --web.config.file), Prometheus scrapes with it and the
// page takes acknowledgements (--web.enable-acknowledgements).
func startStack(t *testing.T, login *url.Userinfo) (ctx context.Context, s *stack) {
	t.Helper()
	root := repoRoot(t)
	examples := filepath.Join(root, "examples")
	dir := t.TempDir()

	prometheusBin, alertmanagerBin, exporterBin, simulatorBin := programs(t, root, dir)

	ctx = testContext(t, runTimeout)

	addrs := freeAddrs(t, 7)
	simAddr, webAddr, hookAddr, promAddr, amAddr, smtpAddr, adminAddr := addrs[0], addrs[1], addrs[2], addrs[3], addrs[4], addrs[5], addrs[6]

	s = &stack{
		dir: dir, prom: promAPI{base: "http://" + promAddr}, am: amAPI{base: "http://" + amAddr},
		receiver: newReceiver(t), webAddr: webAddr, hookAddr: hookAddr, admin: "http://" + adminAddr,
		exporterBin: exporterBin,
	}
	exporterFile := filepath.Join(dir, "breach_exporter.yml")
	s.exporterFile = exporterFile
	s.exporter = exporterConfig(t, examples, exporterFile, simAddr)
	s.owners = ownerSources(t, dir)
	configureOwnerSources(t, exporterFile, s.owners)
	ruleCopy := filepath.Join(dir, "breach_exporter.test-rules.yml")
	writeTestRules(t, filepath.Join(root, "alerts", "breach_exporter.rules.yml"), ruleCopy)
	prometheusFile := filepath.Join(dir, "prometheus.yml")
	s.prometheusFile = prometheusFile
	ruleFiles := prometheusConfig(t, examples, prometheusFile, []string{webAddr}, amAddr, ruleCopy)
	if want := filepath.Join(root, "alerts", "breach_exporter.rules.yml"); !slices.Equal(ruleFiles, []string{want}) {
		t.Fatalf("examples/prometheus.yml loads rule files %v, want only %s", ruleFiles, want)
	}
	if login != nil {
		s.requireLogin(t, login, prometheusFile)
	}
	alertmanagerFile := filepath.Join(dir, "alertmanager.yml")
	alertmanagerConfig(t, examples, alertmanagerFile, s.receiver.server.Listener.Addr().String(), smtpAddr)

	// Receivers first, senders last: nothing the simulator or Prometheus
	// sends early is lost.
	s.start(t, dir, "alertmanager", alertmanagerBin,
		"--config.file="+alertmanagerFile,
		"--storage.path="+filepath.Join(dir, "alertmanager-data"),
		"--web.listen-address="+amAddr,
		"--cluster.listen-address=") // no gossip
	s.start(t, dir, "prometheus", prometheusBin,
		"--config.file="+prometheusFile,
		"--storage.tsdb.path="+filepath.Join(dir, "prometheus-data"),
		"--web.listen-address="+promAddr)
	s.start(t, dir, "simulator", simulatorBin,
		"--web.listen-address="+simAddr,
		"--api.token-file="+s.exporter.tokenFile,
		"--sweep.interval="+sweepInterval,
		"--seed="+simulatorSeed,
		"--webhook.url=http://"+hookAddr+"/webhook",
		"--webhook.secret-file="+s.exporter.secretFile,
		"--admin.listen-address="+adminAddr)
	s.waitReady(ctx, t, "simulator", "http://"+simAddr+"/openapi.json")
	s.setUpSubject(ctx, t)
	s.startExporter(ctx, t, "exporter")
	s.waitReady(ctx, t, "alertmanager", "http://"+amAddr+"/-/ready")
	s.waitReady(ctx, t, "prometheus", s.prom.base+"/-/ready")

	return ctx, s
}

// snapshotInterval is the exporter's --storage.snapshot-interval: short,
// so that a write fails within seconds of its folder going away.
const snapshotInterval = "2s"

// startExporter starts the exporter (again, after a stop) on its ports,
// under a new name (its log file's).
func (s *stack) startExporter(ctx context.Context, t *testing.T, name string) {
	t.Helper()
	if err := s.tryStartExporter(ctx, t, name); err != nil {
		t.Fatal(err)
	}
}

// tryStartExporter is startExporter for scenario goroutines: it reports
// instead of failing the test.
func (s *stack) tryStartExporter(ctx context.Context, t *testing.T, name string) error {
	t.Helper()
	args := []string{
		"--config.file=" + s.exporterFile,
		"--web.listen-address=" + s.webAddr,
		"--webhook.listen-address=" + s.hookAddr,
		"--web.external-url=http://" + s.webAddr + "/",
		"--storage.path=" + s.storageDir(),
		"--storage.snapshot-interval=" + snapshotInterval,
	}
	s.start(t, s.dir, name, s.exporterBin, append(args, s.exporterArgs...)...)
	s.mu.Lock()
	s.exporterName = name
	s.mu.Unlock()
	for _, url := range []string{s.webURL("/-/ready"), "http://" + s.hookAddr + "/-/healthy"} {
		if err := s.poll(ctx, startupTimeout, func(ctx context.Context) error { return getOK(ctx, url) }); err != nil {
			return fmt.Errorf("%s ready: %v", name, err)
		}
	}
	return nil
}

// storageDir is the exporter's --storage.path.
func (s *stack) storageDir() string { return filepath.Join(s.dir, "exporter-data") }

// runningExporter is the exporter process started last.
func (s *stack) runningExporter() *process {
	s.mu.Lock()
	name := s.exporterName
	s.mu.Unlock()
	return s.process(name)
}

// testContext ends after timeout, or earlier when go test's -timeout would
// otherwise kill the test before its cleanups stop the processes.
func testContext(t *testing.T, timeout time.Duration) context.Context {
	deadline := time.Now().Add(timeout)
	if d, ok := t.Deadline(); ok && d.Add(-cleanupMargin).Before(deadline) {
		deadline = d.Add(-cleanupMargin)
	}
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	t.Cleanup(cancel)
	return ctx
}

func (s *stack) start(t *testing.T, dir, name, bin string, args ...string) {
	t.Helper()
	p := startProcess(t, dir, name, bin, args...)
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
}

// process returns the running process started under name.
func (s *stack) process(name string) *process {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if p.name == name {
			return p
		}
	}
	return nil
}

// procsExited reports the first process that ended without the test
// stopping it.
func (s *stack) procsExited() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.procs {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

func (s *stack) waitReady(ctx context.Context, t *testing.T, name, url string) {
	t.Helper()
	s.eventually(ctx, t, name+" ready", startupTimeout, func(ctx context.Context) error { return getOK(ctx, url) })
}

// permanent marks a check's error as one that waiting cannot fix.
type permanent struct{ error }

// eventually polls check until it returns nil, failing the test when the
// timeout passes, check fails permanently, or a process has died.
func (s *stack) eventually(ctx context.Context, t *testing.T, what string, timeout time.Duration, check func(context.Context) error) {
	t.Helper()
	if err := s.poll(ctx, timeout, check); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func (s *stack) targetUp(ctx context.Context, t *testing.T) {
	s.eventually(ctx, t, "job "+jobName+" up", startupTimeout, func(ctx context.Context) error {
		targets, err := s.prom.activeTargets(ctx)
		if err != nil {
			return err
		}
		var ours []target
		for _, tg := range targets {
			if tg.Labels["job"] == jobName {
				ours = append(ours, tg)
			}
		}
		switch {
		case len(ours) == 0: // service discovery has not synced yet
			return fmt.Errorf("no active target of job %q", jobName)
		case len(ours) > 1:
			return permanent{fmt.Errorf("want one active target of job %q, got %+v", jobName, ours)}
		}
		tg := ours[0]
		if tg.Labels["instance"] != s.webAddr {
			return permanent{fmt.Errorf("target instance %q, want %q", tg.Labels["instance"], s.webAddr)}
		}
		if tg.Health != "up" {
			return fmt.Errorf("target %s is %q: %s", tg.ScrapeURL, tg.Health, tg.LastError)
		}
		return nil
	})
}

// rulesHealthy checks that Prometheus loaded exactly the rules of the file
// and that each has been evaluated without error.
func (s *stack) rulesHealthy(ctx context.Context, t *testing.T) {
	want := ruleNames(t)
	s.eventually(ctx, t, "rules loaded and evaluated", dataTimeout, func(ctx context.Context) error {
		loaded, err := s.prom.rules(ctx)
		if err != nil {
			return err
		}
		var got, pending []string
		for _, r := range loaded {
			name := r.Group + "/" + r.Name
			got = append(got, name)
			switch {
			case r.Health == "err" || r.LastError != "":
				return permanent{fmt.Errorf("rule %s: %s", name, r.LastError)}
			case r.Health != "ok" || r.LastEvaluation.IsZero():
				pending = append(pending, name)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return permanent{fmt.Errorf("Prometheus loaded rules %v, the rules file has %v", got, want)}
		}
		if len(pending) > 0 {
			return fmt.Errorf("not evaluated yet: %v", pending)
		}
		return nil
	})
}
