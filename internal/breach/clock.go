// SPDX-License-Identifier: Apache-2.0

package breach

import "time"

// MaxFutureSkew is how far ahead of the exporter's clock a time from
// outside (an alert's observed_at, a time in the state snapshot) may be and
// still be taken as it is: clocks a few minutes apart are normal, a time
// far ahead would pin a gauge that only moves forward, or an address's
// place in the schedule, for good.
const MaxFutureSkew = 5 * time.Minute

// InFuture reports whether t is more than MaxFutureSkew ahead of now.
func InFuture(t, now time.Time) bool {
	return t.After(now.Add(MaxFutureSkew))
}
