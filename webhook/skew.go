package webhook

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// maxFutureSkew is how far ahead of the exporter's clock an observed_at may
// be and still move breach_alert_last_observed_timestamp_seconds. The gauge
// only moves forward, so one alert dated in year 9999 would otherwise pin it
// for good; clocks a few minutes apart are normal.
const maxFutureSkew = 5 * time.Minute

// inFuture reports whether observed is more than maxFutureSkew ahead of now.
func inFuture(observed, now time.Time) bool {
	return observed.After(now.Add(maxFutureSkew))
}

func newFutureObservedCounter() prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{
		Name: "breach_webhook_alerts_future_observed_total",
		Help: "Accepted alerts whose observed_at was more than 5 minutes ahead of the exporter's clock; they are counted but do not move breach_alert_last_observed_timestamp_seconds.",
	})
}
