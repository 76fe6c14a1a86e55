// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

func newFutureObservedCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "breach_webhook_alerts_future_observed_total",
		Help: "Accepted alerts whose observed_at was more than 5 minutes ahead of the exporter's clock; they are counted but do not move breach_alert_last_observed_timestamp_seconds.",
	})
}
