// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { os.Exit(ShareRedis(m).Run()) }

// Two stores of one test are two databases of one server; a test's data
// goes with it; and the server refuses what would reach beyond a database.
func TestSharedRedisKeepsTestsApart(t *testing.T) {
	ctx := context.Background()
	client := func(t *testing.T, r *Redis) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), DB: r.DB(), Protocol: 2})
		t.Cleanup(func() { c.Close() })
		return c
	}
	var first *Redis
	t.Run("writes", func(t *testing.T) {
		first = StartRedis(t)
		second := StartRedis(t)
		if first.Addr() != second.Addr() || first.DB() == second.DB() {
			t.Fatalf("two stores of one test: %s db %d and %s db %d, want one server, two databases", first.Addr(), first.DB(), second.Addr(), second.DB())
		}
		if want := fmt.Sprintf("redis://%s/%d", first.Addr(), first.DB()); first.URL() != want {
			t.Errorf("URL %q, want %q", first.URL(), want)
		}
		if err := client(t, first).Set(ctx, "k", "first", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if n, err := client(t, second).Exists(ctx, "k").Result(); err != nil || n != 0 {
			t.Errorf("the second store sees the first's key: %d, %v", n, err)
		}
		for _, cmd := range [][]any{{"FLUSHALL"}, {"CONFIG", "SET", "maxmemory", "1"}, {"REPLICAOF", "127.0.0.1", "1"}, {"SHUTDOWN", "NOSAVE"}} {
			if err := client(t, first).Do(ctx, cmd...).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
				t.Errorf("%v on the shared server: %v, want NOPERM", cmd[0], err)
			}
		}
	})
	t.Run("reads", func(t *testing.T) {
		r := StartRedis(t)
		if r.Addr() != first.Addr() || r.DB() != first.DB() {
			t.Fatalf("the next test's store is %s db %d, want the same server and the database freed, %s db %d", r.Addr(), r.DB(), first.Addr(), first.DB())
		}
		if n, err := client(t, r).DBSize(ctx).Result(); err != nil || n != 0 {
			t.Errorf("the next test's store holds %d keys (%v), want none", n, err)
		}
	})
}
