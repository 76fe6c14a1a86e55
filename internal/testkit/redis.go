// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Redis is a real redis-server on a loopback port, without persistence:
// a database of the one server the test binary shares (StartRedis), or a
// server of one test's own (StartOwnRedis). Stop and Start restart an own
// server on the same port (its data gone); Pause and Resume freeze it
// (SIGSTOP, SIGCONT): a store that holds its connections and data but
// answers nothing, as one lost to the network.
type Redis struct {
	t     testing.TB
	addr  string
	dir   string
	out   *SyncBuffer
	extra []string // more arguments of redis-server
	db    int      // the test's database
	// shared is set on a database of the shared server, which no test may
	// stop, freeze or reconfigure.
	shared bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	paused bool
}

// StartRedis gives t a store of its own: in a package whose TestMain
// calls ShareRedis, an emptied database of the test binary's one
// redis-server, emptied again when t ends; elsewhere a server of its own
// (StartOwnRedis). The databases are handed out lowest first, so while
// tests run one at a time (t.Parallel is not used with it) a test's first
// store is database 0, and a client of Addr alone sees its keys; a second
// store of one test is another database (DB). The shared server refuses
// what would reach beyond a database (FLUSHALL, CONFIG, ACL, REPLICAOF,
// SHUTDOWN, DEBUG, ...): a test that needs them, or Stop, Start, Pause or
// Resume, starts its own with StartOwnRedis. Without redis-server
// (Debian's redis-server package; make redis-server installs it) the test
// fails, or skips under -short.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	needRedisServer(t)
	sharing.mu.Lock()
	enabled := sharing.enabled
	sharing.mu.Unlock()
	if !enabled {
		return StartOwnRedis(t)
	}
	return sharedDatabase(t)
}

// StartOwnRedis starts a redis-server for t alone and kills it when t
// ends: for a test that stops, freezes or reconfigures its store (SIGSTOP,
// a restart, CONFIG SET maxmemory, read-only, a replica, ACL users).
func StartOwnRedis(t testing.TB) *Redis {
	t.Helper()
	needRedisServer(t)
	r := &Redis{t: t, dir: t.TempDir(), out: &SyncBuffer{}}
	t.Cleanup(r.kill)
	if err := r.launchOnFreePort(t); err != nil {
		t.Fatalf("redis-server: %v\n%s", err, r.out.String())
	}
	return r
}

func needRedisServer(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if testing.Short() {
			t.Skip("redis-server is not installed (make redis-server installs it)")
		}
		t.Fatal("redis-server is not installed: make redis-server installs Debian's redis-server package")
	}
}

// launchOnFreePort launches r on a free loopback port. The free port may
// be taken between finding and binding it: another one then.
func (r *Redis) launchOnFreePort(t testing.TB) error {
	var err error
	for range 3 {
		r.addr = FreeAddress(t)
		if err = r.launch(); err == nil {
			return nil
		}
	}
	return err
}

// URL is the redis:// URL of the test's store: the server and, on the
// shared server, the database.
func (r *Redis) URL() string {
	if r.shared {
		return fmt.Sprintf("redis://%s/%d", r.addr, r.db)
	}
	return "redis://" + r.addr
}

// DB is the number of the test's database: 0 on a server of its own.
func (r *Redis) DB() int { return r.db }

// Addr is the server's host:port.
func (r *Redis) Addr() string { return r.addr }

// Start starts the server again on its port after Stop.
func (r *Redis) Start() {
	r.t.Helper()
	r.mustOwn("Start")
	r.mu.Lock()
	running := r.cmd != nil
	r.mu.Unlock()
	if running {
		r.t.Fatal("redis-server: Start while it runs")
	}
	if err := r.launch(); err != nil {
		r.t.Fatalf("redis-server: %v\n%s", err, r.out.String())
	}
}

// Stop ends the server (SIGTERM) and waits until it has exited.
func (r *Redis) Stop() {
	r.t.Helper()
	r.mustOwn("Stop")
	if err := r.stop(syscall.SIGTERM); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
}

// Pause freezes the server: connections stay open and nothing answers.
func (r *Redis) Pause() { r.signal("Pause", syscall.SIGSTOP, true) }

// Resume lets a paused server go on.
func (r *Redis) Resume() { r.signal("Resume", syscall.SIGCONT, false) }

func (r *Redis) signal(what string, sig syscall.Signal, paused bool) {
	r.t.Helper()
	r.mustOwn(what)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		r.t.Fatalf("redis-server: %v while it is stopped", sig)
	}
	if err := r.cmd.Process.Signal(sig); err != nil {
		r.t.Fatalf("redis-server: %v: %v", sig, err)
	}
	r.paused = paused
}

// mustOwn fails the test when r is a database of the shared server.
func (r *Redis) mustOwn(what string) {
	r.t.Helper()
	if r.shared {
		r.t.Fatalf("redis-server: %s of the server other tests share; StartOwnRedis starts one of the test's own", what)
	}
}

// launch starts redis-server on r.addr and returns once it answers PING.
func (r *Redis) launch() error {
	_, port, _ := net.SplitHostPort(r.addr)
	cmd := exec.Command("redis-server", append([]string{
		"--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", r.dir,
		"--loglevel", "warning"}, r.extra...)...)
	cmd.Stdout, cmd.Stderr = r.out, r.out
	// A test binary that dies (a panic, -timeout) leaves no server behind.
	cmd.SysProcAttr = dieWithParent()
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	r.mu.Lock()
	r.cmd, r.done, r.paused = cmd, done, false
	r.mu.Unlock()

	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(r.addr)
		if err == nil {
			return nil
		}
		select {
		case <-done:
			r.mu.Lock()
			r.cmd = nil
			r.mu.Unlock()
			return fmt.Errorf("exited before it answered (%v)", err)
		default:
		}
		if time.Now().After(deadline) {
			_ = r.stop(syscall.SIGKILL)
			return fmt.Errorf("no answer to PING in 10 s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends sig (SIGKILL after 10 s without exiting) and waits.
func (r *Redis) stop(sig syscall.Signal) error {
	r.mu.Lock()
	cmd, done, paused := r.cmd, r.done, r.paused
	r.cmd, r.paused = nil, false
	r.mu.Unlock()
	if cmd == nil {
		return nil
	}
	_ = cmd.Process.Signal(sig)
	if paused {
		// A stopped process acts on SIGTERM only once it runs again.
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	select {
	case <-done:
		return nil
	case <-time.After(10 * time.Second):
	}
	_ = cmd.Process.Kill()
	<-done
	return errors.New("did not exit in 10 s of " + sig.String() + "; killed")
}

func (r *Redis) kill() { _ = r.stop(syscall.SIGKILL) }

// ping sends PING over a fresh connection and expects PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("answered %q", line)
	}
	return nil
}

// dieWithParent has the kernel kill a process started for tests when the
// test binary dies before it can (a panic, -timeout). Only Linux has the
// field, and a build tag would need a lint run of its own: it is set when
// it exists.
func dieWithParent() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if f := reflect.ValueOf(attr).Elem().FieldByName("Pdeathsig"); f.IsValid() && f.Type() == reflect.TypeOf(syscall.SIGKILL) {
		f.Set(reflect.ValueOf(syscall.SIGKILL))
	}
	return attr
}
