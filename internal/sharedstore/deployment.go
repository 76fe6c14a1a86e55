// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-kit/log/level"
	"github.com/redis/go-redis/v9"
)

// A store serves one deployment under a key prefix. Its identity
// (Options.Deployment) is written at the first start and checked by every
// replica at every health check: a replica of another deployment, or the
// same prefix configured twice by accident, refuses the store rather than
// merge two deployments' budgets, claims and streams.

// The states of Client.joined.
const (
	joinUnknown = iota // not checked yet: commands wait for the check
	joinOK
	joinForeign // another deployment's: every command is refused
)

// ErrForeign is the error of a store that holds another deployment's
// identity under the prefix.
type ErrForeign struct {
	Prefix string
	Ours   string
	Theirs string
}

func (e *ErrForeign) Error() string {
	return fmt.Sprintf("store: key_prefix %q holds another deployment (%s, this one is %s): give each deployment its own store.key_prefix; a replica of this deployment whose identity changed (a rotated API key with the derived identity) needs store.deployment set to %q",
		e.Prefix, e.Theirs, e.Ours, e.Theirs)
}

// errNotJoined refuses a command before the store's identity was checked.
var errNotJoined = errors.New("the deployment's identity in the store is not checked yet")

// Join checks the store's identity, writing it when the store has none,
// and tells whether the store answers writes; *ErrForeign when the store
// is another deployment's. Run checks it again at every health check.
func (s *Client) Join(ctx context.Context) error {
	return s.check(ctx)
}

// check is the health check: one script writes this replica's alive key
// and the deployment's identity where none is, and returns the identity
// the store holds.
func (s *Client) check(ctx context.Context) error {
	ctx = context.WithValue(ctx, joiningKey{}, true)
	theirs, err := healthScript.Run(ctx, s.rdb,
		[]string{s.key("alive", s.replica), s.key("deployment")},
		millis(3*s.pingEvery), s.identity).Text()
	if err = s.outcome(ctx, opHealth, err); err != nil {
		return err
	}
	if theirs != s.identity {
		ferr := &ErrForeign{Prefix: s.name, Ours: s.identity, Theirs: theirs}
		if s.joined.Swap(joinForeign) != joinForeign {
			level.Error(s.logger).Log("msg", "The shared store holds another deployment under this key prefix; this replica does not use it", "err", ferr)
		}
		s.setUp(false, true, ferr, true)
		return ferr
	}
	if s.joined.Swap(joinOK) == joinUnknown {
		s.warnWithoutAuth(ctx)
	}
	return nil
}

type joiningKey struct{}

// gate refuses every command but the health check until the store's
// identity is checked, and every one after it was found another's.
type gate struct{ s *Client }

func (g gate) allowed(ctx context.Context) error {
	if ctx.Value(joiningKey{}) != nil {
		return nil
	}
	switch g.s.joined.Load() {
	case joinOK:
		return nil
	case joinForeign:
		return &ErrForeign{Prefix: g.s.name, Ours: g.s.identity, Theirs: "another"}
	}
	return errNotJoined
}

func (g gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.allowed(ctx); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (g gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.allowed(ctx); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// warnWithoutAuth logs, once, a store that takes commands from anyone:
// whoever reaches it can read the stream and forge events.
func (s *Client) warnWithoutAuth(ctx context.Context) {
	if s.auth {
		return
	}
	level.Warn(s.logger).Log("msg", "The shared store takes commands without authentication: anyone who reaches it can read and forge the replicas' state; set a password (store.password_file) or an ACL user (docs/replicas.md)")
}

// countReplicas keeps how many replicas the store has (INFO
// replication), for the publish's WAIT, and warns once of a store that
// evicts keys (INFO memory). A store whose ACL refuses INFO is taken to
// have no replicas, and said so once.
func (s *Client) countReplicas(ctx context.Context) {
	shard, err := s.shard(ctx)
	if err != nil {
		return
	}
	info, err := shard.Info(ctx, "replication", "memory").Result()
	if err != nil {
		var reply redis.Error
		if errors.As(err, &reply) && !s.waitRefused.Swap(true) {
			level.Warn(s.logger).Log("msg", "The store refuses INFO replication: a publish does not wait for the store's replicas (a failover may lose the last alerts the journal released)", "err", err)
		}
		return
	}
	s.storeReplicas.Store(int32(onlineReplicas(info)))
	if policy := infoField(info, "maxmemory_policy"); policy != "" && policy != "noeviction" && !s.evictionWarned.Swap(true) {
		level.Warn(s.logger).Log("msg", "The store evicts keys when its memory is full: it may drop the keys that tell a duplicate alert and the request budget; set maxmemory-policy noeviction", "maxmemory_policy", policy)
	}
}

// infoField is the value of name in an INFO reply, "" when absent.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// onlineReplicas counts the replicas INFO replication lists online.
func onlineReplicas(info string) int {
	n := 0
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(name, "slave") {
			continue
		}
		if _, err := strconv.Atoi(strings.TrimPrefix(name, "slave")); err == nil && strings.Contains(value, "state=online") {
			n++
		}
	}
	return n
}
