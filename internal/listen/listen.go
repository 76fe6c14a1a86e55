// Package listen opens the exporter's listeners the way exporter-toolkit's
// web.ListenAndServe does (TCP or vsock addresses, or systemd socket
// activation), but with a cap on the connections each one holds open, so a
// flood of idle connections cannot use up the process's file descriptors.
// Serving, TLS and basic auth stay exporter-toolkit's (web.ServeMultiple).
package listen

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
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
	// Metrics, when set, shows the open connections and the waits.
	Metrics *Metrics
}

// Metrics are the connection-limit metrics of every listener.
type Metrics struct {
	open  *prometheus.GaugeVec
	max   *prometheus.GaugeVec
	waits *prometheus.CounterVec
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
	}
	for _, c := range []prometheus.Collector{m.open, m.max, m.waits} {
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
	if lim.MaxConnections < 1 {
		return nil, fmt.Errorf("%s: the connection limit must be at least 1, got %d", lim.Name, lim.MaxConnections)
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
	if lim.Metrics != nil {
		lim.Metrics.max.WithLabelValues(lim.Name).Set(float64(lim.MaxConnections))
		lim.Metrics.open.WithLabelValues(lim.Name).Add(0)
		lim.Metrics.waits.WithLabelValues(lim.Name).Add(0)
	}
	return out, nil
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
// netutil.LimitListener. Below it, every connection is counted from accept
// to close; above it, an Accept that finds all slots taken counts a wait.
func limit(l net.Listener, lim Limit) net.Listener {
	c := &counting{Listener: l}
	if lim.Metrics != nil {
		c.gauge = lim.Metrics.open.WithLabelValues(lim.Name)
	}
	w := &watching{Listener: netutil.LimitListener(c, lim.MaxConnections), open: &c.open, max: int64(lim.MaxConnections)}
	if lim.Metrics != nil {
		w.waits = lim.Metrics.waits.WithLabelValues(lim.Name)
	}
	return w
}

// counting counts the connections it accepted that are not closed yet.
type counting struct {
	net.Listener
	open  atomic.Int64
	gauge prometheus.Gauge // may be nil
}

func (c *counting) Accept() (net.Conn, error) {
	conn, err := c.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c.add(1)
	return &countedConn{Conn: conn, l: c}, nil
}

func (c *counting) add(n int64) {
	c.open.Add(n)
	if c.gauge != nil {
		c.gauge.Add(float64(n))
	}
}

type countedConn struct {
	net.Conn
	l    *counting
	once sync.Once
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.add(-1) })
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
