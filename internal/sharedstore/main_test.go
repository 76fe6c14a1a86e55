// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// The tests share one redis-server (testkit.ShareRedis). Follow and Run
// must end with their context, and Close must leave no goroutine of the
// client behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(testkit.ShareRedis(m)) }
