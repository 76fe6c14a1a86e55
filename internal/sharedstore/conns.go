// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"net"
	"sync"
	"time"
)

// connSet holds the client's open connections, so that Interrupt can end
// the commands in flight on them. (go-redis bounds a command by a
// deadline, and does not watch its context's cancellation.)
type connSet struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.set.remove(c) })
	return err
}

func (s *connSet) add(c net.Conn) net.Conn {
	t := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[*trackedConn]struct{}{}
	}
	s.conns[t] = struct{}{}
	return t
}

func (s *connSet) remove(c *trackedConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, c)
}

// interrupt ends what every open connection is doing: a read or write
// blocked on one returns at once with a timeout, after which the client
// drops the connection. An idle one is unharmed: the client sets its
// deadline again for its next command.
func (s *connSet) interrupt() {
	s.mu.Lock()
	open := make([]*trackedConn, 0, len(s.conns))
	for c := range s.conns {
		open = append(open, c)
	}
	s.mu.Unlock()
	now := time.Now()
	for _, c := range open {
		_ = c.SetDeadline(now)
	}
}
