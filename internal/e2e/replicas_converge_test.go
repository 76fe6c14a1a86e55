// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// convergeBodies is the number of distinct alerts TestReplicasConverge
// sends, each to two replicas, 100 ms apart: the faults happen while they
// arrive.
const convergeBodies = 600

// convergeOutage is how long the store stays paused (scenario a) or
// stopped (b): longer than a start waits for it (10 s).
const convergeOutage = 20 * time.Second

// TestReplicasConverge proves, on three built replicas and a real
// redis-server with signed alerts arriving the whole time, the starts a
// platform team's rollouts and outages produce:
//
//   - a: a replica replaced by one on an empty folder (a new pod with an
//     emptyDir) while the store is paused, then the store resumed: it
//     catches up fully;
//   - c: right after, that replica replaced again by one on an empty folder
//     (the order of a maxSurge: 1 rollout): it starts from the whole state;
//   - b: another replica replaced by one on an empty folder while the store
//     is stopped, then started again empty (its data gone): the replicas
//     that hold the history give it back, and the new one catches up.
//
// Afterwards every replica says it is synced, serves the same per-address
// series, and counts every alert answered 204 once; breach_api_up, sampled
// every second on every replica that serves, never reads other than 1.
//
// It runs with BREACH_E2E_REPLICAS=1 (make replicas-test), in about two
// and a half minutes.
func TestReplicasConverge(t *testing.T) {
	if os.Getenv("BREACH_E2E_REPLICAS") != "1" {
		t.Skip("set BREACH_E2E_REPLICAS=1 to run the three-replica tests (make replicas-test)")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	exporterBin := filepath.Join(dir, "breach_exporter")
	goBuild(testContext(t, buildTimeout), t, root, exporterBin, ".")
	ctx := testContext(t, replicasRunTimeout)
	rs := newSmallReplicaSet(ctx, t, dir, exporterBin)
	rs.eventually(ctx, t, "every replica synced", startupTimeout, rs.synced)

	apiUp := rs.sampleAPIUp(ctx)
	bodies := rs.bodies(t, 0, convergeBodies, -1)
	pauseAt, surgeAt, emptyAt, holdAt := 100, 300, 400, 550
	faults := map[int]chan struct{}{pauseAt: make(chan struct{}), surgeAt: make(chan struct{}), emptyAt: make(chan struct{})}
	sent := rs.sendDuring(ctx, t, bodies, faults, holdAt, func() error {
		victim := rs.replicas[2]
		if err := waitFor(ctx, faults[pauseAt]); err != nil {
			return err
		}
		// Paused longer than a start waits for the store: the
		// replica starts without it.
		if err := rs.replaceDuringOutage(ctx, victim, "empty-while-paused", rs.store.Pause, rs.store.Resume); err != nil {
			return err
		}
		if err := waitFor(ctx, faults[surgeAt]); err != nil {
			return err
		}
		if err := rs.replaceEmpty(ctx, victim, "surge"); err != nil {
			return err
		}
		if err := waitFor(ctx, faults[emptyAt]); err != nil {
			return err
		}
		// Scenario b: the store's data gone when it comes back.
		return rs.replaceDuringOutage(ctx, rs.replicas[0], "empty-while-store-restarted", rs.store.Stop, rs.store.Start)
	})
	rs.checkRun(ctx, t, sent, convergeBodies)
	if err := rs.synced(ctx); err != nil {
		t.Error(err)
	}
	apiUp.check(t)
}

// replaceDuringOutage takes the store away (down), replaces victim by a
// replica on an empty folder meanwhile (it starts without the store),
// brings the store back (up) convergeOutage after it went away, whether or
// not readiness waits for it, and returns once every replica is synced
// again.
func (rs *replicaSet) replaceDuringOutage(ctx context.Context, victim *replica, why string, down, up func()) error {
	down()
	back := make(chan struct{})
	go func() {
		defer close(back)
		outage := time.NewTimer(convergeOutage) // the outage's length, not a wait for anything
		defer outage.Stop()
		select {
		case <-outage.C:
		case <-ctx.Done():
		}
		up()
	}()
	err := rs.replaceEmpty(ctx, victim, why)
	<-back
	if err != nil {
		return err
	}
	if err := rs.poll(ctx, convergeTimeout, rs.synced); err != nil {
		return fmt.Errorf("after the store came back (%s): %v", why, err)
	}
	return nil
}

// newSmallReplicaSet starts a store, the stand-in API and three replicas
// of bin, without Prometheus and Alertmanager, and waits for the first
// round.
func newSmallReplicaSet(ctx context.Context, t *testing.T, dir, bin string) *replicaSet {
	rs := startSmallReplicaSet(ctx, t, &replicaSet{stack: &stack{dir: dir}, t: t, bin: bin})
	rs.eventually(ctx, t, "the first round: every address read, each by one replica", maxReadGap, rs.firstRound)
	return rs
}

// startSmallReplicaSet starts rs's store, the stand-in API and three
// replicas of rs.bin (with rs.extraArgs), without Prometheus and
// Alertmanager, and waits until every replica reports the store up.
func startSmallReplicaSet(ctx context.Context, t *testing.T, rs *replicaSet) *replicaSet {
	ports := freeAddrs(t, 2*replicaCount)
	for i := range replicaCount {
		rs.replicas = append(rs.replicas, &replica{index: i, webAddr: ports[2*i], hookAddr: ports[2*i+1],
			dir: filepath.Join(rs.stack.dir, fmt.Sprintf("replica-%d-data", i))})
	}
	rs.store = testkit.StartRedis(t)
	rs.api = testkit.NewStandIn(t, nil)
	rs.writeConfig(t)
	for _, r := range rs.replicas {
		if err := rs.startReplica(ctx, r, "start"); err != nil {
			t.Fatal(err)
		}
	}
	rs.eventually(ctx, t, "every replica reports the store up", startupTimeout, rs.storeUp(1))
	return rs
}

// previousRelease is the release before versioned store formats: the
// upgrade test runs it side by side with this one.
const previousRelease = "28b5cca"

// TestReplicasUpgradeAndRollback runs two builds as replicas of one store,
// as a rolling upgrade and a rollback do: three replicas of the previous release, upgraded one
// at a time to this one, then one rolled back, and replaced onto an empty
// folder, with signed alerts arriving the whole time. Every alert answered
// 204 is counted once, the same on every replica, whichever build serves
// it, and the previous release on the empty folder starts from the store's
// checkpoint, which this release writes whole beside it. It needs the
// repository's history (git) to build the previous release.
func TestReplicasUpgradeAndRollback(t *testing.T) {
	if os.Getenv("BREACH_E2E_REPLICAS") != "1" {
		t.Skip("set BREACH_E2E_REPLICAS=1 to run the three-replica tests (make replicas-test)")
	}
	root := repoRoot(t)
	dir := t.TempDir()
	buildCtx := testContext(t, buildTimeout)
	newBin, oldBin := filepath.Join(dir, "breach_exporter"), filepath.Join(dir, "breach_exporter-"+previousRelease)
	goBuild(buildCtx, t, root, newBin, ".")
	oldRoot := filepath.Join(dir, "src-"+previousRelease)
	if err := os.MkdirAll(oldRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	archive := exec.CommandContext(buildCtx, "sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, previousRelease, oldRoot)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("the previous release's source (git archive %s): %v\n%s", previousRelease, err, out)
	}
	goBuild(buildCtx, t, oldRoot, oldBin, ".")
	ctx := testContext(t, replicasRunTimeout)
	rs := newSmallReplicaSet(ctx, t, dir, oldBin)

	bodies := rs.bodies(t, 0, convergeBodies, -1)
	steps := []struct {
		at      int
		replica int
		bin     string
		empty   bool
	}{
		{100, 0, newBin, false}, {200, 1, newBin, false}, {300, 2, newBin, false},
		{420, 1, oldBin, false}, // a rollback, with its folder
		{470, 1, oldBin, true},  // ... and onto an empty folder: it starts from the store's checkpoint
	}
	holdAt := 500
	faults := map[int]chan struct{}{}
	for _, st := range steps {
		faults[st.at] = make(chan struct{})
	}
	var emptyStart string // the process of the last step
	sent := rs.sendDuring(ctx, t, bodies, faults, holdAt, func() error {
		for _, st := range steps {
			if err := waitFor(ctx, faults[st.at]); err != nil {
				return err
			}
			rs.bin = st.bin
			r := rs.replicas[st.replica]
			if !st.empty {
				if err := rs.restart(ctx, r, false); err != nil {
					return err
				}
				continue
			}
			if err := rs.replaceEmpty(ctx, r, "rollback-empty"); err != nil {
				return err
			}
			rs.mu.Lock()
			emptyStart = r.name
			rs.mu.Unlock()
		}
		return nil
	})
	rs.checkRun(ctx, t, sent, convergeBodies)
	// The replicas of this release write the checkpoint whole while one of
	// the previous release is alive: a replica of it on an empty folder
	// loads it (28b5cca logs the start from the store's checkpoint only
	// after decoding it).
	if emptyStart == "" {
		return // faults failed, reported above
	}
	log, err := os.ReadFile(rs.process(emptyStart).logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "Starting from the store's checkpoint") {
		t.Errorf("the replica of %s started on an empty folder did not start from the store's checkpoint (%s)", previousRelease, emptyStart)
	}
}

// sendDuring sends bodies 100 ms apart while faults runs: its steps wait
// for the sender to reach the bodies of faults' channels, and the body at
// holdAt waits for faults to be over, so that the run always overlaps them.
func (rs *replicaSet) sendDuring(ctx context.Context, t *testing.T, bodies []hookBody, reached map[int]chan struct{}, holdAt int, faults func() error) sendResult {
	t.Helper()
	gate := make(chan struct{})
	var faultErr error
	go func() {
		defer close(gate)
		faultErr = faults()
	}()
	sent := rs.send(ctx, bodies, 100*time.Millisecond, reached, map[int]<-chan struct{}{holdAt: gate})
	<-gate
	if faultErr != nil {
		t.Errorf("faults: %v", faultErr)
	}
	return sent
}

// replaceEmpty stops r (SIGTERM) and starts it again on its ports with an
// empty folder of its own: a new pod with an emptyDir.
func (rs *replicaSet) replaceEmpty(ctx context.Context, r *replica, why string) error {
	rs.mu.Lock()
	name := r.name
	rs.mu.Unlock()
	if err := rs.process(name).stopNow(); err != nil {
		return err
	}
	r.dir = filepath.Join(rs.dir, fmt.Sprintf("replica-%d-%s", r.index, why))
	return rs.startReplica(ctx, r, why)
}

// synced holds when every replica says it holds the cluster's history.
func (rs *replicaSet) synced(ctx context.Context) error {
	for _, r := range rs.replicas {
		m, err := scrape(ctx, r)
		if err != nil {
			return err
		}
		if v := m[testkit.Series("breach_exporter_store_synced")]; v != 1 {
			return fmt.Errorf("replica %d: breach_exporter_store_synced %v", r.index, v)
		}
	}
	return nil
}
