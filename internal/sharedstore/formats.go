// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Every replica's alive key (the health check's) holds the store format
// its release reads: a release writes what every alive replica reads, so
// that two releases run side by side during an upgrade or a rollback. The
// previous release (28b5cca) writes "1" there: it reads the checkpoint
// whole only.

// The store formats: FormatParts reads the checkpoint in parts
// (parts.go). Format is the one this release announces.
const (
	FormatParts = 2
	Format      = FormatParts
)

// maxAliveScanned bounds the alive keys Formats reads: a store that holds
// more (or keys forged to look alive) counts as one where not every
// replica announced a format, and a writer keeps to the oldest.
const maxAliveScanned = 64

// Formats reports the lowest store format the alive replicas of the
// deployment announce (0 for a value that is no number, or none alive),
// (0 too when every key expired since the scan), and whether it read every alive key: complete is false when there are
// more than maxAliveScanned. A caller that finds an error, or complete
// false, takes the lowest format as unknown.
func (s *Client) Formats(ctx context.Context) (lowest int, complete bool, err error) {
	var node redis.Cmdable = s.rdb
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		// Every key of the deployment is in one slot (its hash tag): the
		// node that holds it holds the alive keys.
		if node, err = c.MasterForKey(ctx, s.key("alive")); err != nil {
			return 0, false, fmt.Errorf("store: formats: %w", err)
		}
	}
	var keys []string
	for cursor := uint64(0); ; {
		found, next, err := node.Scan(ctx, cursor, globEscaper.Replace(s.key("alive"))+":*", 1000).Result()
		if err != nil {
			return 0, false, fmt.Errorf("store: formats: %w", err)
		}
		keys = append(keys, found...)
		if len(keys) > maxAliveScanned {
			return 0, false, nil
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	if len(keys) == 0 {
		return 0, true, nil
	}
	vals, err := node.MGet(ctx, keys...).Result()
	if err != nil {
		return 0, false, fmt.Errorf("store: formats: %w", err)
	}
	lowest = -1
	for _, v := range vals {
		str, ok := v.(string)
		if !ok {
			continue // expired since the scan
		}
		f, err := strconv.Atoi(str)
		if err != nil || f < 0 {
			f = 0
		}
		if lowest < 0 || f < lowest {
			lowest = f
		}
	}
	return max(lowest, 0), true, nil
}

// globEscaper escapes what SCAN's MATCH pattern reads as a glob in a key
// prefix (key_prefix may hold them): another prefix's keys would count,
// or this one's would not.
var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)
