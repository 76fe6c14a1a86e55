// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-kit/log/level"
	"github.com/redis/go-redis/v9"
	"golang.org/x/time/rate"
)

// The store formats an alive key announces (healthScript): the formats its
// release writes and reads, so that a writer keeps to what every alive
// replica reads while two releases run side by side. 1, the previous
// releases' '1': unsigned, the checkpoint whole. 2, this release: every
// entry, checkpoint and lease signed (sign.go), and the checkpoint read in
// parts (FormatParts: the exporter writes parts once every alive replica
// reads them).
const (
	FormatParts = 2
	storeFormat = FormatParts
)

// The alive keys are found by a SCAN of the keyspace: the previous release
// writes nothing else a replica of it could be told by. The keyspace holds
// a seen key per alert of the dedup window, hundreds of thousands on a busy
// deployment, so the SCAN is a pass paced over time (formatsPass) and
// Formats answers from the last pass that ended.
const (
	// maxAlive bounds the alive keys a pass reads: a deployment runs a
	// handful of replicas. More leaves the pass incomplete.
	maxAlive = 64
	// scanCount is the keys of the database a SCAN call looks at;
	// scansPerSecond bounds the calls a replica sends, 0.6-0.8 ms of
	// the store's time each: a pass over 150,000 keys takes 15 s and
	// about 8 ms of the store's time a second.
	scanCount      = 1000
	scansPerSecond = 10
	// formatsStale is the age past which the last pass tells nothing
	// (passResult.stale): a replica could have started since unseen.
	formatsStale = 2 * time.Minute
)

// formatsPass is the SCAN for the alive keys, resumed where it stopped by
// each step; turn (one slot) lets one step run at a time and a waiting
// caller give up at its deadline. Everything else is the turn's holder's.
type formatsPass struct {
	turn  chan struct{}
	scans *rate.Limiter
	// The pass under way: on which server, where, since when, in how many
	// calls so far, with the alive keys found.
	addr    string
	cursor  uint64
	started time.Time
	calls   int
	keys    []string
	// last is the last pass that ended; err, the last step's error.
	last passResult
	err  error
	// signingSince is when the first of the passes in a row that saw every
	// alive replica sign started (zero: the last one did not): latch.go.
	signingSince time.Time
}

// passResult is what a pass saw: the lowest format announced (0: none
// alive), whether it read every alive key, and when it ran; signingSince
// is formatsPass's as the pass ended.
type passResult struct {
	lowest                          int
	complete                        bool
	started, finished, signingSince time.Time
	calls                           int
}

// stale reports whether the pass tells nothing any more: it ended more
// than formatsStale ago, or three of its durations on a keyspace so large
// that a pass takes longer.
func (r passResult) stale() bool {
	return r.finished.IsZero() || time.Since(r.finished) > max(formatsStale, 3*r.finished.Sub(r.started))
}

func newFormatsPass() formatsPass {
	return formatsPass{
		turn:  make(chan struct{}, 1),
		scans: rate.NewLimiter(scansPerSecond, scansPerSecond),
	}
}

// Formats reports the store format every replica alive under the prefix
// announces, from the last pass of the SCAN for their alive keys: the
// lowest (0 when none is alive); complete is false when the pass could not
// read them all (more than maxAlive), when no pass ended yet or the last
// is stale. The call advances the pass first, as
// far as its pace allows: on a keyspace one SCAN call covers, every call
// makes a pass of its own, so the answer is of now. An alive key that is
// not a number is format 1: the releases before formats wrote '1'. Its
// errors say nothing of store_up, which the health check keeps: a store
// whose ACL refuses SCAN or MGET (the previous release's least privilege
// had neither) answers all the rest, and is said so once.
func (s *Client) Formats(ctx context.Context) (lowest int, complete bool, err error) {
	last, err := s.advanceFormats(ctx)
	if err != nil {
		return 0, false, err
	}
	if last.stale() {
		return 0, false, nil
	}
	return last.lowest, last.complete, nil
}

// advanceFormats takes the pass's turn, steps it and returns the last pass
// that ended.
func (s *Client) advanceFormats(ctx context.Context) (last passResult, err error) {
	// On a cluster the shard's client has not the gate's stop deadline.
	ctx, cancel, err := s.stopping(ctx)
	defer cancel()
	if err != nil {
		return last, err
	}
	p := &s.formats
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return last, s.formatsRefused(ctx.Err())
	}
	defer func() { <-p.turn }()
	if err := s.stepFormats(ctx, p); err != nil {
		// The latch's wait starts again, as after a pass that saw an
		// older format: what the store held meanwhile is unknown.
		p.err, p.signingSince = err, time.Time{}
	}
	return p.last, s.formatsRefused(p.err)
}

// paceFormats steps the pass every second until ctx ends, so that it ends
// on a large keyspace whoever asks.
func (s *Client) paceFormats(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sctx, cancel := context.WithTimeout(ctx, pingTimeout)
		_, _ = s.advanceFormats(sctx) // the callers of Formats see its error
		cancel()
	}
}

// stepFormats sends the SCAN calls the pace allows, ending the pass when
// the cursor comes back to 0 (or it found more than maxAlive keys) and
// stopping there: the next step starts the next pass. A pass that ended in
// one call (a keyspace of fewer than scanCount keys) costs no more than
// one and is not paced. An error starts the pass again.
func (s *Client) stepFormats(ctx context.Context, p *formatsPass) error {
	shard, err := s.shard(ctx)
	if err != nil {
		return err
	}
	if addr := shard.Options().Addr; addr != p.addr {
		// A cursor is one server's: a failover starts the pass again.
		p.addr, p.cursor = addr, 0
	}
	match := globEscape(s.key("alive")) + ":*"
	for {
		if (p.cursor != 0 || p.last.calls != 1) && !p.scans.Allow() {
			return nil
		}
		if p.cursor == 0 {
			p.started, p.calls, p.keys = time.Now(), 0, p.keys[:0]
		}
		page, cursor, err := shard.Scan(ctx, p.cursor, match, scanCount).Result()
		if err != nil {
			p.cursor = 0
			return err
		}
		p.err = nil
		p.cursor = cursor
		p.calls++
		p.keys = append(p.keys, page...)
		switch {
		case len(p.keys) > maxAlive:
			p.cursor = 0
			p.end(0, false)
			return nil
		case cursor == 0:
			lowest, err := lowestFormat(ctx, shard, p.keys)
			if err != nil {
				return err
			}
			p.end(lowest, true)
			return nil
		}
	}
}

// end records the pass that ended, and the run of passes that saw every
// alive replica sign.
func (p *formatsPass) end(lowest int, complete bool) {
	switch {
	case !complete || lowest < signedFormat:
		p.signingSince = time.Time{}
	case p.signingSince.IsZero():
		p.signingSince = p.started
	}
	p.last = passResult{lowest: lowest, complete: complete, started: p.started, finished: time.Now(), signingSince: p.signingSince, calls: p.calls}
}

// lowestFormat reads the alive keys and returns the lowest format they
// announce; 0 when none is alive.
func lowestFormat(ctx context.Context, shard *redis.Client, keys []string) (lowest int, err error) {
	if len(keys) == 0 {
		return 0, nil
	}
	vals, err := shard.MGet(ctx, keys...).Result()
	if err != nil {
		return 0, err
	}
	for _, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // expired since the SCAN
		}
		f, perr := strconv.Atoi(str)
		if perr != nil || f < 1 {
			f = 1
		}
		if lowest == 0 || f < lowest {
			lowest = f
		}
	}
	return lowest, nil
}

// formatsRefused logs, once, a store that refuses Formats' commands, and
// returns err as Formats' error.
func (s *Client) formatsRefused(err error) error {
	if err == nil {
		return nil
	}
	var reply redis.Error
	if errors.As(err, &reply) && !s.formatsWarned.Swap(true) {
		level.Warn(s.logger).Log("msg", "The store refuses SCAN or MGET: this replica cannot tell when every replica signs, and the deployment does not become signed only; add +scan +mget to the ACL (docs/replicas.md)", "err", err)
	}
	return fmt.Errorf("store: formats: %w", err)
}

// globEscape escapes what SCAN's MATCH reads as a pattern: a key_prefix
// may hold it.
func globEscape(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
