// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The store topologies platform teams run, started on loopback from
// Debian's packages (redis-server, redis-sentinel, redis-tools) for the
// runs of make store-topologies-test.

// TopologiesEnv, set, runs the tests of the store topologies.
const TopologiesEnv = "BREACH_STORE_TOPOLOGIES"

// StoreTopologies skips t unless TopologiesEnv is set, and fails it when
// a program the topologies need is missing.
func StoreTopologies(t testing.TB) {
	t.Helper()
	if os.Getenv(TopologiesEnv) == "" {
		t.Skip("a store topology: make store-topologies-test runs it")
	}
	for _, bin := range []string{"redis-server", "redis-sentinel", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed: make store-topologies-test installs it", bin)
		}
	}
}

// process is a program started for one test, killed when it ends.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startProcess(t testing.TB, out *SyncBuffer, name string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// freePort is a free loopback port.
func freePort(t testing.TB) string {
	_, port, _ := net.SplitHostPort(FreeAddress(t))
	return port
}

// waitUntil polls cond every 20 ms until it holds, failing t after d.
func waitUntil(t testing.TB, d time.Duration, what string, out *SyncBuffer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s\n%s", d, what, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// RedisCluster is a Redis Cluster of masters on loopback, over TLS only
// (the cluster bus too), with certificates of a CA made for the test.
type RedisCluster struct {
	Addrs []string
	CA    *CA
	// CertFile and KeyFile are a client's certificate: the nodes ask
	// every client for one.
	CertFile, KeyFile string
	out               *SyncBuffer
}

// StartRedisCluster starts masters redis-servers in cluster mode, each
// with extra arguments (an ACL user, say), and makes them one cluster.
func StartRedisCluster(t testing.TB, masters int, extra ...string) *RedisCluster {
	t.Helper()
	c := &RedisCluster{CA: NewCA(t), out: &SyncBuffer{}}
	cert, key := c.CA.Issue(t, "node")
	c.CertFile, c.KeyFile = c.CA.Issue(t, "client")
	for range masters {
		port, dir := freePort(t), t.TempDir()
		args := []string{"--bind", "127.0.0.1", "--port", "0", "--tls-port", port,
			"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", c.CA.File,
			"--tls-cluster", "yes", "--tls-replication", "yes",
			"--cluster-enabled", "yes", "--cluster-port", freePort(t), "--cluster-node-timeout", "5000",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--save", "", "--appendonly", "no", "--dir", dir, "--loglevel", "warning"}
		startProcess(t, c.out, "redis-server", append(args, extra...)...)
		c.Addrs = append(c.Addrs, "127.0.0.1:"+port)
	}
	for _, addr := range c.Addrs {
		node := c.Node(t, addr)
		waitUntil(t, 10*time.Second, "a cluster node to answer", c.out, func() bool { return node.Ping(context.Background()).Err() == nil })
	}
	create := exec.Command("redis-cli", append(append(c.cliTLS(), "--cluster", "create"), append(c.Addrs, "--cluster-replicas", "0", "--cluster-yes")...)...)
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s\n%s", err, out, c.out.String())
	}
	for _, addr := range c.Addrs {
		node := c.Node(t, addr)
		waitUntil(t, 30*time.Second, "the cluster's state ok on "+addr, c.out, func() bool {
			info, err := node.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
	}
	return c
}

func (c *RedisCluster) cliTLS() []string {
	return []string{"--tls", "--cacert", c.CA.File, "--cert", c.CertFile, "--key", c.KeyFile}
}

// TLS is the client's TLS settings for the cluster's nodes.
func (c *RedisCluster) TLS(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(c.CA.File)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}

// Node is a plain client of one node, as the default user.
func (c *RedisCluster) Node(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, TLSConfig: c.TLS(t), MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// Sentinels are a primary, its replica and three redis-sentinels that
// watch them on loopback, with a password of their own.
type Sentinels struct {
	Primary, Replica *Redis
	Addrs            []string
	MasterName       string
	Password         string
	out              *SyncBuffer
}

// StartSentinels starts the primary, the replica and the Sentinels, and
// returns once the Sentinels know each other and the replica.
func StartSentinels(t testing.TB) *Sentinels {
	t.Helper()
	s := &Sentinels{Primary: StartOwnRedis(t), Replica: StartOwnRedis(t), MasterName: "breach", Password: "sentinel-pw", out: &SyncBuffer{}}
	ctx := context.Background()
	primary := plainClient(t, s.Primary.Addr(), "")
	host, port, _ := net.SplitHostPort(s.Primary.Addr())
	// The first sync at once, not after the default 5 s.
	if err := primary.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatal(err)
	}
	if err := plainClient(t, s.Replica.Addr(), "").ReplicaOf(ctx, host, port).Err(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		s.Addrs = append(s.Addrs, s.startSentinel(t, port))
	}
	for _, addr := range s.Addrs {
		sentinel := plainClient(t, addr, s.Password)
		waitUntil(t, 30*time.Second, "the Sentinels to know each other and the replica", s.out, func() bool {
			m, err := sentinel.Do(ctx, "SENTINEL", "MASTER", s.MasterName).StringSlice()
			return err == nil && field(m, "num-other-sentinels") == "2" && field(m, "num-slaves") == "1"
		})
	}
	return s
}

func (s *Sentinels) startSentinel(t testing.TB, primaryPort string) string {
	port, dir := freePort(t), t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf(`bind 127.0.0.1
port %s
dir %s
sentinel resolve-hostnames no
requirepass %s
sentinel sentinel-pass %s
sentinel monitor %s 127.0.0.1 %s 2
sentinel down-after-milliseconds %[5]s 1000
sentinel failover-timeout %[5]s 10000
`, port, dir, s.Password, s.Password, s.MasterName, primaryPort)
	if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	startProcess(t, s.out, "redis-sentinel", conf, "--loglevel", "warning")
	return "127.0.0.1:" + port
}

// PrimaryAddr is the address the Sentinels give for the primary now.
func (s *Sentinels) PrimaryAddr(t testing.TB) string {
	t.Helper()
	addr, err := plainClient(t, s.Addrs[0], s.Password).Do(context.Background(), "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName).StringSlice()
	if err != nil || len(addr) != 2 {
		return ""
	}
	return net.JoinHostPort(addr[0], addr[1])
}

// WaitFailover waits until the Sentinels name the replica the primary.
func (s *Sentinels) WaitFailover(t testing.TB) {
	t.Helper()
	waitUntil(t, 60*time.Second, "the Sentinels to promote the replica", s.out, func() bool { return s.PrimaryAddr(t) == s.Replica.Addr() })
}

// Kill ends the server at once (SIGKILL): a crash, nothing written.
func (r *Redis) Kill() {
	r.t.Helper()
	if err := r.stop(syscall.SIGKILL); err != nil {
		r.t.Fatalf("redis-server: %v", err)
	}
}

func plainClient(t testing.TB, addr, password string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: password, Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// field is the value of name in a flat name, value reply.
func field(reply []string, name string) string {
	for i := 0; i+1 < len(reply); i += 2 {
		if reply[i] == name {
			return reply[i+1]
		}
	}
	return ""
}
