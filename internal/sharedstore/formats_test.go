// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// Formats reads the format every alive replica of the deployment
// announces: this release's health check announces storeFormat, the previous
// release's "1"; a value that is no number counts as 1 (the releases before formats), another prefix's
// replicas do not count (also when the prefix holds a glob's characters), and more alive keys than it reads make it
// incomplete.
func TestFormatsReadsTheAliveReplicasAnnouncements(t *testing.T) {
	r := testkit.StartRedis(t)
	a := open(t, r, "a", "") // joined: its alive key written
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer rdb.Close()
	check := func(what string, lowest int, complete bool) {
		t.Helper()
		l, c, err := a.Formats(ctx)
		if err != nil || l != lowest || c != complete {
			t.Fatalf("%s: Formats %d, %v, %v; want %d, %v", what, l, c, err, lowest, complete)
		}
	}
	check("this release alone", storeFormat, true)
	set := func(key, value string) {
		t.Helper()
		if err := rdb.Set(ctx, key, value, time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
	}
	set("other:alive:old", "1")
	check("another prefix's replica of the previous release", storeFormat, true)
	set("breach_exporter:alive:old", "1") // 28b5cca's health check
	check("a replica of the previous release", 1, true)
	set("breach_exporter:alive:old", "x")
	check("a replica that announces no number", 1, true)
	if err := rdb.Del(ctx, "breach_exporter:alive:old").Err(); err != nil {
		t.Fatal(err)
	}
	check("the replica of the previous release gone", storeFormat, true)
	// A prefix with a glob's characters matches its own keys only.
	g := open(t, r, "g", "g*[")
	set("gx[:alive:old", "1")
	if l, c, err := g.Formats(ctx); err != nil || l != storeFormat || !c {
		t.Fatalf("a prefix with a glob's characters: Formats %d, %v, %v; want %d, true", l, c, err, storeFormat)
	}
	for i := range maxAlive {
		set(fmt.Sprintf("breach_exporter:alive:r%d", i), "2")
	}
	check("more alive keys than it reads", storeFormat, false)
}
