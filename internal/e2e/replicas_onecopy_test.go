// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// One copy in Prometheus: TestReplicas scrapes the replicas as
// examples/prometheus-replicas.yml says, each replica for its own health
// (scope=replica) and the cluster's series once, through service, a
// stand-in for a Kubernetes Service in front of the three.

// clusterJob is the example's scrape config of the cluster's series.
const clusterJob = "breach-cluster"

// service passes each connection to the next replica that accepts one, in
// turn, as a Service's virtual address does (per connection).
type service struct {
	ln       net.Listener
	backends []string
	mu       sync.Mutex
	next     int
	conns    map[net.Conn]struct{}
	closed   bool
}

func newService(t *testing.T, addr string, backends []string) *service {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &service{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	t.Cleanup(s.close)
	go s.serve()
	return s
}

func (s *service) serve() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		go s.pass(c)
	}
}

// pass connects c to the first backend, from the next in turn, that
// accepts a connection.
func (s *service) pass(c net.Conn) {
	s.mu.Lock()
	first := s.next
	s.next = (s.next + 1) % len(s.backends)
	s.mu.Unlock()
	for i := range s.backends {
		up, err := net.DialTimeout("tcp", s.backends[(first+i)%len(s.backends)], time.Second)
		if err != nil {
			continue
		}
		if !s.track(c, up) {
			return
		}
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		_, _ = io.Copy(c, up)
		c.Close()
		return
	}
	c.Close()
}

// track remembers the pair for close; false (both closed) after close.
func (s *service) track(conns ...net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	for _, c := range conns {
		s.conns[c] = struct{}{}
	}
	return true
}

func (s *service) close() {
	s.ln.Close()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
}

// serving is the replica whose state answers the scrapes of the
// cluster's series: the one the store's lease names.
func (rs *replicaSet) serving(ctx context.Context) (*replica, error) {
	c := redis.NewClient(&redis.Options{Addr: rs.store.Addr(), Protocol: 2})
	defer c.Close()
	v, err := c.Get(ctx, replicasKeyPrefix+":serving").Result()
	if err != nil {
		return nil, fmt.Errorf("the store names no serving replica: %w", err)
	}
	for _, r := range rs.replicas {
		if strings.HasSuffix(v, "\nhttp://"+r.webAddr+"/metrics") {
			return r, nil
		}
	}
	return nil, fmt.Errorf("the store's serving replica %q is none of the replicas", v)
}

// killServing kills (SIGKILL) the replica serving the cluster's series and
// starts it again.
func (rs *replicaSet) killServing(ctx context.Context) error {
	r, err := rs.serving(ctx)
	if err != nil {
		return err
	}
	rs.t.Logf("killing replica %d, the one serving the cluster's series", r.index)
	return rs.restart(ctx, r, true)
}

// checkOneCopy checks that the cluster's series reached Prometheus once,
// through restarts and the SIGKILL of the serving replica: every alert
// counter series of the run has one copy (the cluster's target), none from
// the replicas' own targets; and it logs what the three replicas cost
// Prometheus against one, per scrape.
func (rs *replicaSet) checkOneCopy(ctx context.Context, t *testing.T) {
	copies, err := rs.prom.query(ctx, `count by (address, severity, source) (last_over_time(breach_alerts_total{job="breach"}[1h]))`)
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) == 0 {
		t.Fatal("Prometheus holds no breach_alerts_total series")
	}
	for _, s := range copies {
		if s.last() != 1 {
			t.Errorf("breach_alerts_total%v reached Prometheus in %v copies over the run, want 1", s.Labels, s.last())
		}
	}
	perReplica, err := rs.prom.query(ctx, `count(last_over_time(breach_address_state{job="breach", instance!="`+rs.service.ln.Addr().String()+`"}[1h]))`)
	if err != nil {
		t.Fatal(err)
	}
	if len(perReplica) > 0 && perReplica[0].last() > 0 {
		t.Errorf("%v breach_address_state series came from the replicas' own targets, want none", perReplica[0].last())
	}
	// Per scrape: the cluster's target and three replicas' health, against
	// the cluster's target and one replica's health.
	samples, err := rs.prom.query(ctx, `scrape_samples_scraped{job="breach"}`)
	if err != nil {
		t.Fatal(err)
	}
	var cluster, replicas, one float64
	for _, s := range samples {
		if s.Labels["instance"] == rs.service.ln.Addr().String() {
			cluster = s.last()
			continue
		}
		replicas += s.last()
		one = max(one, s.last())
	}
	if cluster == 0 || one == 0 {
		t.Fatalf("no samples scraped from the cluster's target (%v) or a replica's (%v)", cluster, one)
	}
	t.Logf("samples per scrape: cluster's target %v, the three replicas' own %v: 3 replicas cost %.2fx one (%d addresses)",
		cluster, replicas, (cluster+replicas)/(cluster+one), replicaAddresses)
}

// clusterTargetUp holds when Prometheus scrapes the cluster's series
// through the service.
func (rs *replicaSet) clusterTargetUp(ctx context.Context) error {
	targets, err := rs.prom.activeTargets(ctx)
	if err != nil {
		return err
	}
	for _, tg := range targets {
		if tg.Labels["job"] == jobName && tg.Labels["instance"] == rs.service.ln.Addr().String() && tg.Health == "up" {
			return nil
		}
	}
	return errors.New("the cluster's target is not up")
}
