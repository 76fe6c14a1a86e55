// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"time"

	"github.com/go-kit/log/level"
)

// A deployment is signed only once every replica of it writes signed
// entries: from then on a replica skips what is unsigned (sign.go). Until
// then a rolling upgrade from the previous release, which signs nothing,
// works. A replica latches when the passes of the SCAN for the alive keys
// under the prefix (formats.go) have seen every one announce format 2 or
// later for latchAfter in a row, and keeps
// the latch in its state and the checkpoint (SignedOnly, Latch): a replica
// on an empty folder that loads a checkpoint that says so is latched, and a
// store that loses its keys does not unlatch replicas that hold it.
// store.accept_unsigned (a rollback to the previous release) keeps a
// replica unlatched.

// latchAfter is how long every replica must announce a signing release
// before the deployment is signed only: several passes (one over a
// keyspace of fewer than 600,000 keys takes less), so that a replica of
// the previous release that restarts is seen.
const latchAfter = time.Minute

// signedFormat is the first store format that signs (Formats): a later
// release that announces a higher one for another reason latches alike.
const signedFormat = 2

// SignedOnly reports whether the deployment is signed only for this
// replica: what it saves says so.
func (s *Client) SignedOnly() bool { return s.signedOnly() }

func (s *Client) signedOnly() bool { return s.latched.Load() }

// Latch makes the deployment signed only for this replica (its state or
// the checkpoint said so), unless the config accepts unsigned entries.
func (s *Client) Latch() {
	if s.acceptUnsigned || s.latched.Swap(true) {
		return
	}
	s.signedGauge.Set(1)
	level.Info(s.logger).Log("msg", "The deployment is signed only: every replica signs what it writes to the store; unsigned entries, checkpoints and leases are skipped from now on")
}

// watchFormats latches once the passes of the SCAN for the alive keys
// (formats.go) that saw every replica alive sign, one after the other
// with none between that saw otherwise, ran for latchAfter: from the start
// of the first to the end of the last. An error, a bound reached, an older
// format or a stale pass starts the wait again.
func (s *Client) watchFormats(ctx context.Context) {
	if s.acceptUnsigned || s.latched.Load() {
		return
	}
	last, err := s.advanceFormats(ctx)
	if err == nil && !last.stale() && !last.signingSince.IsZero() && last.finished.Sub(last.signingSince) >= s.latchAfter {
		s.Latch()
	}
}
