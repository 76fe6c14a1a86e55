// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// redisServer is a real redis-server (or valkey-server) on a loopback
// port, with nothing written to disk: the replicated figures measure the
// store the way it is deployed, over TCP, not a fake in this process.
type redisServer struct {
	addr   string // host:port
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
	logs   *bytes.Buffer
}

// startRedis starts the server in a temporary working folder (left
// empty, and removed by stop) and waits until it answers PING.
func startRedis() (*redisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		var verr error
		if bin, verr = exec.LookPath("valkey-server"); verr != nil {
			return nil, fmt.Errorf("the replicated figures need redis-server or valkey-server on PATH (Debian's redis-server package): %w", err)
		}
	}
	addr, err := freeLoopbackAddress()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "breach-bench-redis-")
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	s := &redisServer{addr: addr, dir: dir, exited: make(chan struct{}), logs: &bytes.Buffer{}}
	s.cmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "yes")
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	go func() {
		s.cmd.Wait()
		close(s.exited)
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := s.ping(); err == nil {
			return s, nil
		} else if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer PING within 30 s: %w\n%s", addr, err, s.logs.Bytes())
		}
		select {
		case <-s.exited:
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server exited before answering\n%s", s.logs.Bytes())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// url is what a store section names.
func (s *redisServer) url() string { return "redis://" + s.addr + "/0" }

// ping sends one inline PING.
func (s *redisServer) ping() error {
	conn, err := net.DialTimeout("tcp", s.addr, time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if strings.TrimSpace(line) != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// stop ends the server with SIGTERM, and SIGKILL if it lingers.
func (s *redisServer) stop() {
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
	os.RemoveAll(s.dir)
}
