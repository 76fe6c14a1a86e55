// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"fmt"
)

// Scan calls apply with every event after after up to and including until,
// in order, as they are (those whose signature the reader accepts: it
// counted the others when it read them): a look back at events read before (the exporter's
// held alerts), not a reader's place. So it neither checks for a gap nor
// moves back nor repairs anything, which Read does for a reader: events
// trimmed since are simply not there, and an entry far ahead of the
// store's clock is skipped.
func (s *Client) Scan(ctx context.Context, after, until string, apply func(Event)) error {
	from := orZero(after)
	for {
		msgs, more, err := s.readPage(ctx, "read", from, until)
		if err != nil {
			return fmt.Errorf("store: scan: %w", err)
		}
		for _, m := range msgs {
			from = m.ID
			if !s.ahead(m.ID) && (m.oversized > 0 || s.admits(s.entryVerdict(m.XMessage))) {
				apply(event(m))
			}
		}
		if !more {
			return nil
		}
	}
}
