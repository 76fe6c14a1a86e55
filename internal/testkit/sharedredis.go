// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// sharedDatabases is how many databases the shared server has: more than
// the stores the tests of one package hold at once.
const sharedDatabases = 64

// sharedDenied are the commands the shared server refuses (an ACL of its
// default user): each reaches beyond one test's database, or changes the
// server under the other tests.
var sharedDenied = []string{
	"-flushall", "-config", "-acl", "-shutdown", "-replicaof", "-slaveof", "-failover",
	"-debug", "-swapdb", "-move", "-monitor", "-client|kill", "-client|pause", "-script|flush",
	"-function", "-save", "-bgsave", "-bgrewriteaof", "-sync", "-psync", "-module",
}

// sharing is the test binary's shared redis-server, started at the first
// StartRedis of a package whose TestMain calls ShareRedis.
var sharing struct {
	mu      sync.Mutex
	enabled bool
	server  *Redis
	err     error  // why the server did not start
	dir     string // the server's --dir, removed with it
	used    [sharedDatabases]bool
}

// ShareRedis, in TestMain, makes StartRedis hand out databases of one
// redis-server for the whole test binary instead of a server per test,
// and stops that server once m's tests are done:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(testkit.ShareRedis(m)) }
func ShareRedis(m interface{ Run() int }) interface{ Run() int } {
	return sharedRun{m}
}

type sharedRun struct{ m interface{ Run() int } }

func (s sharedRun) Run() int {
	sharing.mu.Lock()
	sharing.enabled = true
	sharing.mu.Unlock()
	code := s.m.Run()
	sharing.mu.Lock()
	defer sharing.mu.Unlock()
	if sharing.server != nil {
		if err := sharing.server.stop(syscall.SIGTERM); err != nil {
			fmt.Fprintf(os.Stderr, "the shared redis-server: %v\n%s", err, sharing.server.out.String())
		}
		os.RemoveAll(sharing.dir)
		sharing.server = nil
	}
	sharing.enabled = false
	return code
}

// sharedDatabase is a database of the shared server for t, which it
// starts at first use; it is emptied now and again when t ends.
func sharedDatabase(t testing.TB) *Redis {
	t.Helper()
	sharing.mu.Lock()
	defer sharing.mu.Unlock()
	if sharing.server == nil && sharing.err == nil {
		sharing.err = startShared(t)
	}
	if sharing.err != nil {
		t.Fatalf("the shared redis-server: %v", sharing.err)
	}
	db := -1
	for n, used := range sharing.used {
		if !used {
			db = n
			break
		}
	}
	if db < 0 {
		t.Fatalf("redis-server: all %d databases of the shared server are in use", sharedDatabases)
	}
	addr := sharing.server.addr
	if err := flushDB(addr, db); err != nil {
		t.Fatalf("the shared redis-server: emptying database %d: %v\n%s", db, err, sharing.server.out.String())
	}
	sharing.used[db] = true
	t.Cleanup(func() {
		err := flushDB(addr, db)
		sharing.mu.Lock()
		sharing.used[db] = false
		sharing.mu.Unlock()
		if err != nil {
			t.Errorf("the shared redis-server: emptying database %d after the test: %v", db, err)
		}
	})
	return &Redis{t: t, addr: addr, db: db, shared: true}
}

// startShared starts the shared server. Its folder is not t's: it
// outlives t.
func startShared(t testing.TB) error {
	dir, err := os.MkdirTemp("", "testkit-redis-")
	if err != nil {
		return err
	}
	r := &Redis{dir: dir, out: &SyncBuffer{},
		extra: append([]string{"--databases", fmt.Sprint(sharedDatabases),
			"--user", "default", "on", "nopass", "~*", "&*", "+@all"}, sharedDenied...)}
	if err := r.launchOnFreePort(t); err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("%w\n%s", err, r.out.String())
	}
	sharing.server, sharing.dir = r, dir
	return nil
}

// flushDB empties database db of the server at addr.
func flushDB(addr string, db int) error {
	c := redis.NewClient(&redis.Options{Addr: addr, DB: db, Protocol: 2, MaxRetries: -1})
	defer c.Close()
	return c.FlushDB(context.Background()).Err()
}
