// SPDX-License-Identifier: Apache-2.0

package testkit

import "testing"

func TestRedisStopsStartsPausesAndResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("two starts of redis-server and a pause, about a second of real time: the full run checks the harness")
	}
	r := StartOwnRedis(t)
	if err := ping(r.Addr()); err != nil {
		t.Fatalf("after StartRedis: %v", err)
	}
	r.Pause()
	if err := ping(r.Addr()); err == nil {
		t.Fatal("a paused server answered")
	}
	r.Resume()
	if err := ping(r.Addr()); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	r.Pause()
	r.Stop() // stops a paused server too
	if err := ping(r.Addr()); err == nil {
		t.Fatal("a stopped server answered")
	}
	r.Start()
	if err := ping(r.Addr()); err != nil {
		t.Fatalf("after Start: %v", err)
	}
	if r.URL() != "redis://"+r.Addr() {
		t.Errorf("URL %q", r.URL())
	}
}
