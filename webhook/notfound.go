// SPDX-License-Identifier: Apache-2.0

package webhook

import "net/http"

// outcomeNotFound counts requests for any path of the webhook listener
// other than the webhook path and HealthyPath: scanners and misconfigured
// senders show in breach_webhook_requests_total instead of vanishing.
const outcomeNotFound = "not_found"

// serveNotFound answers 404 and counts the request. Like every rejection it
// logs at debug level only and never reads the body.
func (h *Handler) serveNotFound(w http.ResponseWriter, r *http.Request) {
	start := h.clock.Now()
	outcome := h.reject(w, r, http.StatusNotFound, outcomeNotFound, "no such path")
	h.metrics.requests[outcome].Inc()
	h.metrics.duration.Observe(h.clock.Since(start).Seconds())
}
