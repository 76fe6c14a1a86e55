// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-kit/log/level"
	"github.com/redis/go-redis/v9"
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

const (
	// maxAlive bounds the alive keys Formats reads: a deployment runs a
	// handful of replicas. More leaves the answer incomplete.
	maxAlive = 64
	// maxScans bounds Formats' SCAN calls, each over scanCount keys of
	// the database: a store that holds many keys leaves it incomplete.
	maxScans  = 64
	scanCount = 1000
)

// Formats reads the store format every replica alive under the prefix
// announces and returns the lowest (0 when none is alive); complete is
// false when it could not read them all within its bounds (more than
// maxAlive keys, or a keyspace SCAN does not cover in maxScans calls).
// An alive key that is not a number is format 1: the releases before
// formats wrote '1'. Its errors say nothing of store_up, which the health
// check keeps: a store whose ACL refuses SCAN or MGET (the previous
// release's least privilege had neither) answers all the rest, and is
// said so once.
func (s *Client) Formats(ctx context.Context) (lowest int, complete bool, err error) {
	// On a cluster the shard's client has not the gate's stop deadline.
	ctx, cancel, err := s.stopping(ctx)
	defer cancel()
	if err != nil {
		return 0, false, err
	}
	shard, err := s.shard(ctx)
	if err != nil {
		return 0, false, err
	}
	keys, complete, err := s.aliveKeys(ctx, shard)
	if err != nil || len(keys) == 0 {
		return 0, complete, s.formatsRefused(err)
	}
	vals, err := shard.MGet(ctx, keys...).Result()
	if err != nil {
		return 0, false, s.formatsRefused(err)
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
	return lowest, complete, nil
}

// aliveKeys lists the alive keys, at most maxAlive, in at most maxScans
// SCAN calls; complete is false when there may be more.
func (s *Client) aliveKeys(ctx context.Context, shard *redis.Client) (keys []string, complete bool, err error) {
	match := globEscape(s.key("alive")) + ":*"
	var cursor uint64
	for range maxScans {
		var page []string
		page, cursor, err = shard.Scan(ctx, cursor, match, scanCount).Result()
		if err != nil {
			return nil, false, err
		}
		keys = append(keys, page...)
		if len(keys) > maxAlive {
			return keys[:maxAlive], false, nil
		}
		if cursor == 0 {
			return keys, true, nil
		}
	}
	return keys, false, nil
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
