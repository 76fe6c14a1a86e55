// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

const (
	// rolloutDelay is the replicas' --web.shutdown-delay: longer than
	// endpointLag plus the time a POST takes, shorter than stopTimeout
	// with the close.
	rolloutDelay = 3 * time.Second
	// endpointLag is how long after a replica's /-/ready reads 503 the
	// sender still posts to it, as an endpoints controller and kube-proxy
	// would.
	endpointLag = time.Second
	// senderPace is how often each replica's sender posts one alert.
	senderPace = 50 * time.Millisecond
	// rolloutBodies bounds the alerts the senders may send in the run.
	rolloutBodies = 6000
)

// rolloutSender posts alerts to one replica every senderPace while it is
// a target: from the first time its /-/ready answers 200 until endpointLag
// after it stops answering 200, and again once it is ready after its
// restart.
type rolloutSender struct {
	rs      *replicaSet
	r       *replica
	next    *atomic.Int64 // the next body, shared by the senders
	bodies  []hookBody
	mu      sync.Mutex
	ok      []int          // bodies answered 204
	failed  map[string]int // any other answer: what it was
	drained int            // POSTs sent after /-/ready read 503, all within endpointLag
}

func (s *rolloutSender) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ok)
}

var readyClient = &http.Client{Timeout: time.Second}

func (s *rolloutSender) ready(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.r.webAddr+"/-/ready", nil)
	if err != nil {
		return false
	}
	resp, err := readyClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (s *rolloutSender) run(ctx context.Context) {
	tick := time.NewTicker(senderPace) // the load's pace: nothing waits on it
	defer tick.Stop()
	target, draining := false, false
	var stopAt time.Time
	for ctx.Err() == nil {
		switch ready := s.ready(ctx); {
		case ready:
			target, draining = true, false
		case target && !draining:
			draining, stopAt = true, time.Now().Add(endpointLag)
		case draining && time.Now().After(stopAt):
			target, draining = false, false
		}
		if target {
			s.post(ctx, draining)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
}

func (s *rolloutSender) post(ctx context.Context, draining bool) {
	i := int(s.next.Add(1)) - 1
	if i >= len(s.bodies) {
		return
	}
	why := s.rs.post(ctx, s.r, s.bodies[i])
	if ctx.Err() != nil {
		return // the run is over: the answer is the test's, not the replica's
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if draining {
		s.drained++
	}
	if why == "" {
		s.ok = append(s.ok, i)
		return
	}
	s.failed[why]++
}

// TestReplicasRollout is scenario (d) of the replicas' promise: a rolling
// restart where each replica gets SIGTERM while a sender posts to it every
// 50 ms, and stops posting to it a second after its /-/ready reads 503
// (an endpoints controller's lag). Every POST is answered 204 (none
// refused or reset: the replica answers through its
// --web.shutdown-delay), and every alert answered 204 is counted once, the
// same on every replica, on a real redis-server with three built
// exporters. About a minute; runs with BREACH_E2E_REPLICAS=1.
func TestReplicasRollout(t *testing.T) {
	if os.Getenv("BREACH_E2E_REPLICAS") != "1" {
		t.Skip("set BREACH_E2E_REPLICAS=1 to run the three-replica tests")
	}
	dir := t.TempDir()
	rs := &replicaSet{stack: &stack{dir: dir}, t: t, bin: filepath.Join(dir, "breach_exporter"),
		extraArgs: []string{"--web.shutdown-delay=" + rolloutDelay.String()}}
	goBuild(testContext(t, buildTimeout), t, repoRoot(t), rs.bin, ".")
	ctx := testContext(t, replicasRunTimeout)
	startSmallReplicaSet(ctx, t, rs)
	apiUp := rs.sampleAPIUp(ctx)

	bodies := rs.bodies(t, 0, rolloutBodies, -1)
	var next atomic.Int64
	sendCtx, stopSending := context.WithCancel(ctx)
	var senders []*rolloutSender
	var wg sync.WaitGroup
	for _, r := range rs.replicas {
		s := &rolloutSender{rs: rs, r: r, next: &next, bodies: bodies, failed: map[string]int{}}
		senders = append(senders, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(sendCtx)
		}()
	}
	rs.eventually(ctx, t, "every replica a target of its sender", startupTimeout, func(context.Context) error {
		for _, s := range senders {
			if s.accepted() < 10 {
				return fmt.Errorf("replica %d answered %d alerts so far", s.r.index, s.accepted())
			}
		}
		return nil
	})
	for _, r := range rs.replicas {
		rs.mu.Lock()
		name := r.name
		rs.mu.Unlock()
		p := rs.process(name)
		start := time.Now()
		if err := p.stopNow(); err != nil {
			t.Fatalf("replica %d: %v", r.index, err)
		}
		if took := time.Since(start); took < rolloutDelay {
			t.Errorf("replica %d exited %v after SIGTERM, before its %v shutdown delay", r.index, took, rolloutDelay)
		}
		if err := rs.startReplica(ctx, r, "after-sigterm"); err != nil {
			t.Fatal(err)
		}
	}
	stopSending()
	wg.Wait()

	accepted := 0
	for _, s := range senders {
		t.Logf("replica %d: %d alerts answered 204 (%d of them within %v after /-/ready read 503); other answers: %v", s.r.index, len(s.ok), s.drained, endpointLag, s.failed)
		accepted += len(s.ok)
		if len(s.failed) > 0 {
			t.Errorf("replica %d refused or reset POSTs during the rollout: %v", s.r.index, s.failed)
		}
		if s.drained == 0 {
			t.Errorf("replica %d: no POST reached it after its /-/ready read 503: the drain was not exercised", s.r.index)
		}
	}
	if int(next.Load()) > len(bodies) {
		t.Errorf("the senders ran out of bodies (%d): the count below misses some", len(bodies))
	}
	if err := rs.poll(ctx, convergeTimeout, rs.converged(accepted)); err != nil {
		t.Errorf("every alert answered 204 counted once, the same on every replica: %v", err)
	}
	apiUp.check(t)
}
