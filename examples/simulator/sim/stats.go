// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"maps"
	"net/http"
)

// Stats are the simulator's counters, for tests to compare with what a
// client observed.
type Stats struct {
	// Requests counts API responses (under /api/v1) by status code.
	Requests map[int]int
	// RateLimited counts 429 responses; the same as Requests[429].
	RateLimited int
	// AlertsProduced counts every alert a sweep produced, delivered or not.
	AlertsProduced map[AlertKey]int
	// Alerts counts alerts the receiver accepted with a 2xx: what a
	// receiver's alert counters should show.
	Alerts     map[AlertKey]int
	Deliveries DeliveryStats
	// RequestsForgotten counts requests dropped from the front of the
	// request log (Requests) to keep it bounded.
	RequestsForgotten int
}

// DeliveryStats count webhook HTTP attempts and abandoned alerts.
type DeliveryStats struct {
	Attempted int // POSTs sent, retries included
	Succeeded int // POSTs answered 2xx
	Failed    int // POSTs that failed: transport error or non-2xx
	GivenUp   int // alerts abandoned after the last retry or at shutdown
}

func newStats() Stats {
	return Stats{Requests: map[int]int{}, AlertsProduced: map[AlertKey]int{}, Alerts: map[AlertKey]int{}}
}

// Stats returns a copy of the counters.
func (s *Simulator) Stats() Stats {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	c := s.stats
	c.Requests = maps.Clone(s.stats.Requests)
	c.AlertsProduced = maps.Clone(s.stats.AlertsProduced)
	c.Alerts = maps.Clone(s.stats.Alerts)
	return c
}

func (s *Simulator) countResponse(status int) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	s.stats.Requests[status]++
	if status == http.StatusTooManyRequests {
		s.stats.RateLimited++
	}
}

func (s *Simulator) countProduced(alerts []Alert) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	for _, a := range alerts {
		s.stats.AlertsProduced[a.Key()]++
	}
}

func (s *Simulator) countAttempt(key AlertKey, err error) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	s.stats.Deliveries.Attempted++
	if err != nil {
		s.stats.Deliveries.Failed++
		return
	}
	s.stats.Deliveries.Succeeded++
	s.stats.Alerts[key]++
}

func (s *Simulator) countGivenUp(alerts int) {
	s.statsMu.Lock()
	defer s.statsMu.Unlock()
	s.stats.Deliveries.GivenUp += alerts
}
