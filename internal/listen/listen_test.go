// SPDX-License-Identifier: Apache-2.0

package listen

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// With a limit of N, N idle connections take every slot: the N+1th
// connection is queued by the kernel and not served until one of them
// closes, and then it is served without any retry on its side.
func TestTheConnectionAfterTheLimitWaitsForAFreeSlot(t *testing.T) {
	const max = 3
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	address := "127.0.0.1:0"
	noSystemd, noConfig := false, ""
	flags := &web.FlagConfig{WebListenAddresses: &[]string{address}, WebSystemdSocket: &noSystemd, WebConfigFile: &noConfig}
	listeners, err := Open(flags, Limit{Name: "test", MaxConnections: max, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served\n") })}
	done := make(chan error, 1)
	go func() { done <- web.ServeMultiple(listeners, srv, flags, slog.New(slog.DiscardHandler)) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	addr := listeners[0].Addr().String()
	open := func() float64 { return testutil.ToFloat64(m.open.WithLabelValues("test")) }

	idle := make([]net.Conn, max)
	for i := range idle {
		idle[i] = dial(t, addr)
	}
	testkit.Eventually(t, "all slots taken", func() bool { return open() == max })

	late := dial(t, addr)
	io.WriteString(late, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	// A bound, not a synchronisation: nothing may arrive while every slot
	// is taken.
	late.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := late.Read(make([]byte, 1)); !isTimeout(err) {
		t.Fatalf("connection %d was served while %d held every slot (read %d bytes, %v)", max+1, max, n, err)
	}
	if got := testutil.ToFloat64(m.waits.WithLabelValues("test")); got < 1 {
		t.Errorf("limit_reached = %v, want at least 1", got)
	}
	if got := testutil.ToFloat64(m.max.WithLabelValues("test")); got != max {
		t.Errorf("max_connections = %v, want %d", got, max)
	}

	idle[0].Close()
	late.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(late), nil)
	if err != nil {
		t.Fatalf("no answer after a slot was freed: %v", err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 100))
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "served") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	for _, c := range append(idle[1:], late) {
		c.Close()
	}
	testkit.Eventually(t, "every connection closed", func() bool { return open() == 0 })
}

func TestOpenChecksItsArguments(t *testing.T) {
	noSystemd, noConfig := false, ""
	none := &web.FlagConfig{WebListenAddresses: &[]string{}, WebSystemdSocket: &noSystemd, WebConfigFile: &noConfig}
	if _, err := Open(none, Limit{Name: "x", MaxConnections: 1}); !errors.Is(err, web.ErrNoListeners) {
		t.Errorf("no address: %v, want ErrNoListeners", err)
	}
	one := &web.FlagConfig{WebListenAddresses: &[]string{"127.0.0.1:0"}, WebSystemdSocket: &noSystemd, WebConfigFile: &noConfig}
	if _, err := Open(one, Limit{Name: "x", MaxConnections: 0}); err == nil {
		t.Error("a limit of 0 was accepted")
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	// The second address is in use: the first listener must not stay open.
	free := testkit.FreeAddress(t)
	two := &web.FlagConfig{WebListenAddresses: &[]string{free, busy.Addr().String()}, WebSystemdSocket: &noSystemd, WebConfigFile: &noConfig}
	if _, err := Open(two, Limit{Name: "x", MaxConnections: 1}); err == nil {
		t.Fatal("a busy address was accepted")
	}
	l, err := net.Listen("tcp", free)
	if err != nil {
		t.Fatalf("the first listener stayed open after the second failed: %v", err)
	}
	l.Close()
	// Socket activation without sockets fails rather than serving nothing.
	os.Unsetenv("LISTEN_FDS")
	systemd := true
	if _, err := Open(&web.FlagConfig{WebSystemdSocket: &systemd, WebConfigFile: &noConfig}, Limit{Name: "x", MaxConnections: 1}); err == nil {
		t.Error("systemd activation without sockets was accepted")
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// One client holds at most PerClient connections: the next one from the
// same address is reset without a request read and counted, while
// another address still gets a slot; a closed connection frees its
// client's share.
func TestOneClientHoldsAtMostItsShare(t *testing.T) {
	const max, perClient = 8, 2
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := TCP("127.0.0.1:0", Limit{Name: "test", MaxConnections: max, PerClient: perClient, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "served\n") })}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	addr := l.Addr().String()
	open := func() float64 { return testutil.ToFloat64(m.open.WithLabelValues("test")) }
	refused := func() float64 { return testutil.ToFloat64(m.refused.WithLabelValues("test")) }
	if got := testutil.ToFloat64(m.maxPerClient.WithLabelValues("test")); got != perClient {
		t.Errorf("max_connections_per_client = %v, want %d", got, perClient)
	}
	if refused() != 0 {
		t.Errorf("refused before any connection: %v", refused())
	}

	held := []net.Conn{dialFrom(t, "127.0.0.2", addr), dialFrom(t, "127.0.0.2", addr)}
	testkit.Eventually(t, "the client's share taken", func() bool { return open() == perClient })

	// The reset may arrive before the dial returns, or at the first read.
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
	if extra, err := d.Dial("tcp", addr); err == nil {
		defer extra.Close()
		io.WriteString(extra, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		extra.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := extra.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("connection %d of one client was not closed (read %d bytes, %v)", perClient+1, n, err)
		}
	}
	testkit.Eventually(t, "the refusal counted", func() bool { return refused() == 1 })
	if open() != perClient {
		t.Errorf("open = %v after a refusal, want %d", open(), perClient)
	}

	// Another address is served at once.
	other := dialFrom(t, "127.0.0.3", addr)
	if got := get(t, other); got != "served" {
		t.Errorf("another client: %q", got)
	}
	other.Close()

	// A closed connection frees a share for its client.
	held[0].Close()
	testkit.Eventually(t, "the closed connection released", func() bool { return open() == perClient-1 })
	if got := get(t, dialFrom(t, "127.0.0.2", addr)); got != "served" {
		t.Errorf("the client after one of its connections closed: %q", got)
	}
	held[1].Close()
}

func TestClientsAreAddressesOrIPv6Slash64(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":            "192.0.2.7/32",
		"::ffff:192.0.2.7":     "192.0.2.7/32",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"2001:db8:1:3::1":      "2001:db8:1:3::/64",
		"fe80::1":              "fe80::/64",
	} {
		if got := clientOf(netip.MustParseAddr(in)).String(); got != want {
			t.Errorf("client of %s = %s, want %s", in, got, want)
		}
	}
}

func TestLimitChecksPerClient(t *testing.T) {
	for _, lim := range []Limit{
		{Name: "x", MaxConnections: 4, PerClient: -1},
		{Name: "x", MaxConnections: 4, PerClient: 5},
		{Name: "x", MaxConnections: 0, PerClient: 0},
	} {
		if l, err := TCP("127.0.0.1:0", lim); err == nil {
			l.Close()
			t.Errorf("%+v was accepted", lim)
		}
	}
	if _, err := TCP("", Limit{Name: "x", MaxConnections: 1}); err == nil {
		t.Error("an empty address was accepted")
	}
}

// dialFrom connects to addr from the loopback address local (all of
// 127.0.0.0/8 is on lo on Linux).
func dialFrom(t *testing.T, local, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends one GET on c and returns the body's first line.
func get(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 100))
	return strings.TrimSpace(string(body))
}
