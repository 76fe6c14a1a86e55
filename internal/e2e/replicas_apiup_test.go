// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// apiUpPace is how often apiUpSampler scrapes each replica, as Prometheus
// would with a short scrape interval.
const apiUpPace = time.Second

// apiUpSampler scrapes every replica's /metrics every apiUpPace while a
// test runs and keeps each sample of breach_api_up that was not 1: the
// API answers 200 throughout, so a rollout or a replacement must never
// show it down (a restarted replica takes it from the store's
// checkpoint). A replica that is stopped or not serving yet answers
// nothing and is skipped. A replica that is not synced
// (breach_exporter_store_synced 0: it started on an empty folder while the
// store did not answer) may not know yet what /me said, and then serves
// no breach_api_up: absent is allowed then, never 0.
type apiUpSampler struct {
	rs      *replicaSet
	stop    context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	samples []int          // per replica, the scrapes that answered
	down    []string       // every sample that was not 1, or absent while synced
	unknown map[string]int // per process, its samples without breach_api_up while not synced
}

// sampleAPIUp starts sampling rs's replicas until check.
func (rs *replicaSet) sampleAPIUp(ctx context.Context) *apiUpSampler {
	ctx, stop := context.WithCancel(ctx)
	s := &apiUpSampler{rs: rs, stop: stop, done: make(chan struct{}), samples: make([]int, len(rs.replicas)),
		unknown: map[string]int{}}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(apiUpPace) // the sampling's pace: nothing waits on it
		defer tick.Stop()
		for {
			for _, r := range rs.replicas {
				s.sample(ctx, r)
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return s
}

func (s *apiUpSampler) sample(ctx context.Context, r *replica) {
	ctx, cancel := context.WithTimeout(ctx, apiUpPace)
	defer cancel()
	m, err := scrape(ctx, r)
	if err != nil {
		return // stopped, not serving yet, or the run is over
	}
	var bad []string
	n := 0
	for k, v := range m {
		if strings.HasPrefix(k, "breach_api_up{") {
			n++
			if v != 1 {
				bad = append(bad, fmt.Sprintf("%s %v", k, v))
			}
		}
	}
	synced := m[testkit.Series("breach_exporter_store_synced")] == 1
	s.rs.mu.Lock()
	name := r.name
	s.rs.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples[r.index]++
	switch {
	case n == 0 && synced:
		bad = append(bad, "breach_api_up absent on a synced replica")
	case n == 0:
		s.unknown[name]++
	}
	for _, b := range bad {
		s.down = append(s.down, fmt.Sprintf("%s %s: %s", time.Now().Format("15:04:05"), name, b))
	}
}

// check stops the sampling and fails t for every sample that was not 1,
// and for a replica never sampled (the sampler saw nothing).
func (s *apiUpSampler) check(t *testing.T) {
	t.Helper()
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("breach_api_up sampled every %v: %v scrapes per replica", apiUpPace, s.samples)
	for i, n := range s.samples {
		if n == 0 {
			t.Errorf("replica %d: breach_api_up never sampled", i)
		}
	}
	for name, n := range s.unknown {
		t.Logf("%s, not synced: breach_api_up absent (not known yet) in %d samples", name, n)
	}
	if len(s.down) > 0 {
		t.Errorf("breach_api_up read other than 1 in %d samples while the API answered 200 (first 10): %s",
			len(s.down), strings.Join(s.down[:min(10, len(s.down))], "; "))
	}
}
