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

	"github.com/breach-exporter/breach_exporter/internal/ratelog"
)

// A store serves one deployment under a key prefix. Its identity
// (Options.Deployment) is written by the first replica that writes to the
// store and checked by every write after it: a replica of another
// deployment, or the same prefix configured twice by accident, refuses the
// store rather than merge two deployments' budgets, claims, streams and
// checkpoints.
//
// Why every write checks it, and not only the health check: a store that
// loses its keys (FLUSHALL, a restart from an older save) loses the
// identity too, and a second deployment that starts then claims it. A
// check every 5 s would leave the first deployment's replicas seconds in
// which they apply the second's events and write checkpoints the second
// loads. So every script that writes the deployment's keys (guarded)
// checks the identity in the same atomic step as its writes, and writes it
// where none is: after a flush the first deployment to write claims the
// store, and the other's next write (or health check) is refused, which
// locks that replica out at once (lockOut). Readers need the same
// protection for what was written before the claim, or by hand: every
// stream entry and checkpoint carries the identity of the deployment that
// wrote it, and a reader skips another's (ours, foreignCheckpoint). The
// previous release (28b5cca) writes neither, and its entries and
// checkpoints carry no identity: they are read as this deployment's, so
// during a rolling upgrade from it the guarantee is that release's (its
// replicas notice another deployment at their health check, within 5 s),
// and it holds whole once every replica runs this one.

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

// check is the health check: one guarded script writes this replica's
// alive key, and the deployment's identity where none is, unless the store
// holds another's.
func (s *Client) check(ctx context.Context) error {
	ctx = context.WithValue(ctx, joiningKey{}, true)
	err := s.run(ctx, healthScript, s.rdb, []string{s.key("alive", s.replica)}, millis(3*s.pingEvery), storeFormat).Err()
	if err = s.outcome(ctx, opHealth, err); err != nil {
		return err
	}
	if s.joined.Swap(joinOK) == joinUnknown {
		s.warnWithoutAuth(ctx)
	}
	return nil
}

// foreignReply starts the error a guarded script replies when the store
// holds another deployment's identity, followed by that identity.
const foreignReply = "FOREIGN"

// luaJoined starts every guarded script: the deployment's key is the last
// key, this deployment's identity the last argument. The other identity in
// the reply is cut to 64 bytes (store.deployment's bound) and stripped of
// control characters: it was read from the store, which anyone who reaches
// it may have written, and it goes to a log.
const luaJoined = `
local deploymentKey, identity = KEYS[#KEYS], ARGV[#ARGV]
local holder = redis.call('GET', deploymentKey)
if holder and holder ~= identity then
  return redis.error_reply('` + foreignReply + ` ' .. (string.gsub(string.sub(holder, 1, 64), '%c', '?')))
end
if not holder then redis.call('SET', deploymentKey, identity) end
`

// guarded is a script that writes the deployment's keys. Only Client.run
// runs one: it passes the deployment's key and identity, which the script
// checks (luaJoined) before it writes anything else.
type guarded struct{ script *redis.Script }

func newGuarded(src string) guarded { return guarded{redis.NewScript(luaJoined + src)} }

// run runs g on c with keys and args, and the deployment's key and
// identity after them.
func (s *Client) run(ctx context.Context, g guarded, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	keys = append(keys[:len(keys):len(keys)], s.key("deployment"))
	return g.script.Run(ctx, c, keys, append(args[:len(args):len(args)], s.identity)...)
}

// lockOut turns a guarded script's refusal into *ErrForeign and locks this
// replica out of the store: counted, logged once, and every later command
// refused (gate) until a health check finds this deployment's identity
// there again. Other errors pass unchanged.
func (s *Client) lockOut(err error) error {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return err
	}
	theirs, ok := strings.CutPrefix(reply.Error(), foreignReply+" ")
	if !ok {
		return err
	}
	s.foreign.WithLabelValues(foreignWrite).Inc()
	ferr := &ErrForeign{Prefix: s.name, Ours: s.identity, Theirs: theirs}
	s.holder.Store(&theirs)
	if s.joined.Swap(joinForeign) != joinForeign {
		level.Error(s.logger).Log("msg", "The shared store holds another deployment under this key prefix; this replica does not use it", "err", ferr)
	}
	return ferr
}

// The values of breach_exporter_store_foreign_total's label what.
const (
	foreignWrite      = "write"
	foreignEvent      = "event"
	foreignCheckpoint = "checkpoint"
)

// entryDeployment is the stream entry's field that names the deployment
// that added it (luaJoined's identity).
const entryDeployment = "deployment"

// ours reports whether stream entry m is this deployment's: it names this
// identity, or none (the previous release's), and its signature is
// accepted (sign.go). Another's is counted and logged, at most once per
// logEvery; so is one whose signature is not accepted.
func (s *Client) ours(m redis.XMessage) bool {
	theirs, _ := m.Values[entryDeployment].(string)
	if s.of(theirs) {
		return s.accepted(s.entryVerdict(m), unverifiedEvent, m.ID)
	}
	s.foreign.WithLabelValues(foreignEvent).Inc()
	if suppressed, ok := s.logs.Allow("foreign-" + foreignEvent); ok {
		level.Warn(s.logger).Log("msg", "Skipped a stream entry of another deployment under this key prefix; this replica applies none", "id", m.ID, "deployment", shown(theirs), ratelog.SuppressedKey, suppressed)
	}
	return false
}

// of reports whether what a stream entry or a checkpoint names as its
// deployment is this one: its identity, or none (the previous release's).
func (s *Client) of(deployment string) bool {
	return deployment == "" || deployment == s.identity
}

// foreignCheckpoint counts and logs, once per checkpoint ID, a checkpoint
// of another deployment (theirs), which is not loaded.
func (s *Client) foreignCheckpoint(id, theirs string) {
	s.foreignMu.Lock()
	seen := s.foreignAt == id
	s.foreignAt = id
	s.foreignMu.Unlock()
	if seen {
		return
	}
	s.foreign.WithLabelValues(foreignCheckpoint).Inc()
	level.Warn(s.logger).Log("msg", "The store's checkpoint is another deployment's: not loaded; a synced replica of this deployment writes over it", "id", shown(id), "deployment", shown(theirs))
}

// shown is a value read from the store, bounded for a log line.
func shown(v string) string {
	const most = 64
	if len(v) > most {
		return v[:most] + "..."
	}
	return v
}

type joiningKey struct{}

// gate refuses every command but the health check until the store's
// identity is checked, and every one after it was found another's; once
// the stop started, it bounds every command by the stop's deadline
// (Client.stopping).
type gate struct{ s *Client }

func (g gate) allowed(ctx context.Context) error {
	if ctx.Value(joiningKey{}) != nil {
		return nil
	}
	switch g.s.joined.Load() {
	case joinOK:
		return nil
	case joinForeign:
		var theirs string
		if h := g.s.holder.Load(); h != nil {
			theirs = *h
		}
		return &ErrForeign{Prefix: g.s.name, Ours: g.s.identity, Theirs: theirs}
	}
	return errNotJoined
}

// admit is the gate's check of one command: ctx bounded by the stop's
// deadline, or why the command is not sent.
func (g gate) admit(ctx context.Context) (context.Context, context.CancelFunc, error) {
	ctx, cancel, err := g.s.stopping(ctx)
	if err == nil {
		err = g.allowed(ctx)
	}
	return ctx, cancel, err
}

func (g gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		ctx, cancel, err := g.admit(ctx)
		defer cancel()
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (g gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		ctx, cancel, err := g.admit(ctx)
		defer cancel()
		if err != nil {
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
