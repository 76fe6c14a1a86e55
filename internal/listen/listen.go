// SPDX-License-Identifier: Apache-2.0

// Package listen opens the exporter's listeners the way exporter-toolkit's
// web.ListenAndServe does (TCP or vsock addresses, or systemd socket
// activation), but with a cap on the connections each one holds open, so a
// flood of idle connections cannot use up the process's file descriptors,
// and optionally a cap per client, so that one client cannot hold every
// slot. Serving, TLS and basic auth stay exporter-toolkit's.
package listen

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coreos/go-systemd/v22/activation"
	"github.com/mdlayher/vsock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/net/netutil"
)

// Limit is what Open caps a listener at.
type Limit struct {
	// Name is the listener's label value on the metrics ("web", "webhook").
	Name string
	// MaxConnections is how many connections each listening socket holds
	// open at once; at least 1. Further connections wait in the kernel's
	// accept queue (and, when that is full, their SYNs are dropped and
	// retried by the client) until one closes: none is served late by a
	// blocked goroutine, and none costs a descriptor before its turn.
	MaxConnections int
	// PerClient, when above 0, is how many of those one client may hold:
	// a connection past it is closed (reset) as soon as it is accepted,
	// without a request read, so a few addresses cannot fill every slot
	// and keep everyone else in the kernel's queue. A client is an IPv4
	// address or an IPv6 /64 (what one host usually gets); connections
	// that are not TCP are not capped per client.
	PerClient int
	// Metrics, when set, shows the open connections and the waits.
	Metrics *Metrics
}

// Metrics are the connection-limit metrics of every listener.
type Metrics struct {
	open         *prometheus.GaugeVec
	max          *prometheus.GaugeVec
	waits        *prometheus.CounterVec
	maxPerClient *prometheus.GaugeVec
	refused      *prometheus.CounterVec
}

// NewMetrics registers the listener metrics on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "breach_exporter_listener_open_connections",
			Help: "Connections the listener holds open now.",
		}, []string{"listener"}),
		max: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "breach_exporter_listener_max_connections",
			Help: "Connections a listening socket holds open at most (--web.max-connections, --webhook.max-connections).",
		}, []string{"listener"}),
		waits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_exporter_listener_connection_limit_reached_total",
			Help: "Times a listener was at its connection limit and new connections had to wait for one to close.",
		}, []string{"listener"}),
		maxPerClient: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "breach_exporter_listener_max_connections_per_client",
			Help: "Connections one client (an IPv4 address or an IPv6 /64) may hold open on the listener (--webhook.max-connections-per-client).",
		}, []string{"listener"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "breach_exporter_listener_client_limit_refused_total",
			Help: "Connections closed as soon as they were accepted because their client already held its share of the listener's connections.",
		}, []string{"listener"}),
	}
	for _, c := range []prometheus.Collector{m.open, m.max, m.waits, m.maxPerClient, m.refused} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Open opens the listeners flags names, each limited to lim.MaxConnections:
// the systemd-activated sockets when flags.WebSystemdSocket is set,
// otherwise one per flags.WebListenAddresses (vsock://:port or a TCP
// address). On error nothing stays open.
func Open(flags *web.FlagConfig, lim Limit) ([]net.Listener, error) {
	if err := lim.check(); err != nil {
		return nil, err
	}
	var raw []net.Listener
	if flags.WebSystemdSocket != nil && *flags.WebSystemdSocket {
		activated, err := activation.Listeners()
		if err != nil {
			return nil, err
		}
		for _, l := range activated {
			if l != nil { // an activated descriptor that is not a socket
				raw = append(raw, l)
			}
		}
		if len(raw) == 0 {
			return nil, errors.New("no socket activation file descriptors found")
		}
	} else {
		if flags.WebListenAddresses == nil || len(*flags.WebListenAddresses) == 0 {
			return nil, web.ErrNoListeners
		}
		for _, address := range *flags.WebListenAddresses {
			l, err := listen(address)
			if err != nil {
				closeAll(raw)
				return nil, err
			}
			raw = append(raw, l)
		}
	}
	out := make([]net.Listener, len(raw))
	for i, l := range raw {
		out[i] = limit(l, lim)
	}
	return out, nil
}

// TCP listens on one TCP address, limited as Open limits its listeners.
func TCP(address string, lim Limit) (net.Listener, error) {
	if err := lim.check(); err != nil {
		return nil, err
	}
	if address == "" {
		// net.Listen would pick a random port on every interface.
		return nil, fmt.Errorf("%s: empty listen address", lim.Name)
	}
	l, err := net.Listen("tcp", address)
	if err != nil {
		return nil, err
	}
	return limit(l, lim), nil
}

func (lim Limit) check() error {
	if lim.MaxConnections < 1 {
		return fmt.Errorf("%s: the connection limit must be at least 1, got %d", lim.Name, lim.MaxConnections)
	}
	if lim.PerClient < 0 || lim.PerClient > lim.MaxConnections {
		return fmt.Errorf("%s: the connection limit per client must be between 0 (none) and the connection limit (%d), got %d", lim.Name, lim.MaxConnections, lim.PerClient)
	}
	return nil
}

// Serve opens the listeners (Open) and serves server on them through
// exporter-toolkit, so flags.WebConfigFile's TLS and basic auth apply. It
// returns when the server stops: nil after Shutdown or Close.
func Serve(server *http.Server, flags *web.FlagConfig, lim Limit, logger *slog.Logger) error {
	listeners, err := Open(flags, lim)
	if err != nil {
		return err
	}
	defer closeAll(listeners)
	logger.Info("Connection limit", "max_connections", lim.MaxConnections)
	err = web.ServeMultiple(listeners, server, flags, logger)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

func listen(address string) (net.Listener, error) {
	if !strings.HasPrefix(address, "vsock://") {
		return net.Listen("tcp", address)
	}
	_, port, err := net.SplitHostPort(strings.TrimPrefix(address, "vsock://"))
	if err != nil {
		return nil, fmt.Errorf("vsock address %q: %w", address, err)
	}
	n, err := strconv.ParseUint(port, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("vsock address %q: bad port", address)
	}
	return vsock.Listen(uint32(n), nil)
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// limit caps l at lim.MaxConnections open connections with
// netutil.LimitListener, and each client at lim.PerClient. Below the
// limit, every connection is counted from accept to close; at it, an
// Accept that finds all slots taken counts a wait. A connection refused
// for its client is closed inside the slot of the Accept that found it,
// so it never holds one.
func limit(l net.Listener, lim Limit) net.Listener {
	c := &counting{Listener: l, perClient: lim.PerClient}
	if lim.PerClient > 0 {
		c.clients = make(map[netip.Prefix]int)
	}
	w := &watching{Listener: netutil.LimitListener(c, lim.MaxConnections), open: &c.open, max: int64(lim.MaxConnections)}
	if m := lim.Metrics; m != nil {
		c.gauge = m.open.WithLabelValues(lim.Name)
		c.gauge.Add(0)
		w.waits = m.waits.WithLabelValues(lim.Name)
		w.waits.Add(0)
		m.max.WithLabelValues(lim.Name).Set(float64(lim.MaxConnections))
		if lim.PerClient > 0 {
			c.refused = m.refused.WithLabelValues(lim.Name)
			c.refused.Add(0)
			m.maxPerClient.WithLabelValues(lim.Name).Set(float64(lim.PerClient))
		}
	}
	return w
}

// counting counts the connections it accepted that are not closed yet, in
// all and per client, and refuses a client's connection past perClient.
type counting struct {
	net.Listener
	open      atomic.Int64
	gauge     prometheus.Gauge // may be nil
	perClient int              // 0: no cap per client
	refused   prometheus.Counter

	mu      sync.Mutex
	clients map[netip.Prefix]int // open connections by client; no zero entries
}

func (c *counting) Accept() (net.Conn, error) {
	for {
		conn, err := c.Listener.Accept()
		if err != nil {
			return nil, err
		}
		client, capped := c.client(conn)
		if capped && !c.admit(client) {
			refuse(conn)
			if c.refused != nil {
				c.refused.Inc()
			}
			continue
		}
		c.add(1)
		return &countedConn{Conn: conn, l: c, client: client, capped: capped}, nil
	}
}

// client is the key conn counts under; capped is false when there is no
// cap per client or the peer has no IP address.
func (c *counting) client(conn net.Conn) (client netip.Prefix, capped bool) {
	if c.perClient == 0 {
		return netip.Prefix{}, false
	}
	tcp, ok := conn.RemoteAddr().(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}, false
	}
	return clientOf(tcp.AddrPort().Addr()), true
}

// clientOf is an IPv4 address (also when mapped into IPv6) or the /64
// of an IPv6 address, which one host can fill with addresses of its own.
func clientOf(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

func (c *counting) admit(client netip.Prefix) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clients[client] >= c.perClient {
		return false
	}
	c.clients[client]++
	return true
}

func (c *counting) release(client netip.Prefix) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.clients[client]--; c.clients[client] <= 0 {
		delete(c.clients, client)
	}
}

// refuse closes conn with a reset: no request is read, nothing is written,
// and the socket does not linger in TIME_WAIT on this side.
func refuse(conn net.Conn) {
	if tcp, ok := conn.(*net.TCPConn); ok {
		_ = tcp.SetLinger(0) // best effort: the Close below refuses either way
	}
	conn.Close()
}

func (c *counting) add(n int64) {
	c.open.Add(n)
	if c.gauge != nil {
		c.gauge.Add(float64(n))
	}
}

type countedConn struct {
	net.Conn
	l      *counting
	client netip.Prefix
	capped bool
	once   sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.add(-1)
		if c.capped {
			c.l.release(c.client)
		}
	})
	return err
}

// watching counts the Accepts that will have to wait for a free slot. The
// server calls Accept again as soon as it has handed a connection on, so
// "all slots taken when Accept is called" is "the limit was reached".
type watching struct {
	net.Listener
	open  *atomic.Int64
	max   int64
	waits prometheus.Counter // may be nil
}

func (w *watching) Accept() (net.Conn, error) {
	if w.waits != nil && w.open.Load() >= w.max {
		w.waits.Inc()
	}
	return w.Listener.Accept()
}
