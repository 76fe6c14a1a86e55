// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Redis is a real redis-server on a loopback port for one test, without
// persistence. Stop and Start restart it on the same port (its data gone);
// Pause and Resume freeze it (SIGSTOP, SIGCONT): a store that holds its
// connections and data but answers nothing, as one lost to the network.
type Redis struct {
	t    testing.TB
	addr string
	dir  string
	out  *SyncBuffer

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when cmd has exited
	paused bool
}

// StartRedis starts redis-server for t and stops it when t ends. Without
// redis-server (Debian's redis-server package; make redis-server installs
// it) the test fails, or skips under -short.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if testing.Short() {
			t.Skip("redis-server is not installed (make redis-server installs it)")
		}
		t.Fatal("redis-server is not installed: make redis-server installs Debian's redis-server package")
	}
	r := &Redis{t: t, dir: t.TempDir(), out: &SyncBuffer{}}
	t.Cleanup(r.kill)
	// The free port may be taken between finding and binding it: another
	// one then.
	var err error
	for range 3 {
		r.addr = FreeAddress(t)
		if err = r.launch(); err == nil {
			return r
		}
	}
	t.Fatalf("redis-server: %v\n%s", err, r.out.String())
	return nil
}

// URL is the redis:// URL of the server.
func (r *Redis) URL() string { return "redis://" + r.addr }

// Addr is the server's host:port.
func (r *Redis) Addr() string { return r.addr }

// Start starts the server again on its port after Stop.
func (r *Redis) Start() {
	r.t.Helper()
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
	if err := r.stop(syscall.SIGTERM); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
}

// Pause freezes the server: connections stay open and nothing answers.
func (r *Redis) Pause() { r.signal(syscall.SIGSTOP, true) }

// Resume lets a paused server go on.
func (r *Redis) Resume() { r.signal(syscall.SIGCONT, false) }

func (r *Redis) signal(sig syscall.Signal, paused bool) {
	r.t.Helper()
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

// launch starts redis-server on r.addr and returns once it answers PING.
func (r *Redis) launch() error {
	_, port, _ := net.SplitHostPort(r.addr)
	cmd := exec.Command("redis-server",
		"--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--dir", r.dir,
		"--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = r.out, r.out
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
