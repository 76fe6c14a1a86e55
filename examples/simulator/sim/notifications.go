// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"encoding/json"
	"net/http"

	"github.com/go-kit/log/level"
)

// NotificationsPath is where the simulator takes Alertmanager's webhook
// notifications: the receivers of examples/alertmanager.yml post to
// NotificationsPath+<receiver>. It stands in for the chat or paging bridge
// a real setup has, logs each alert and answers 200, so the demo's
// Alertmanager has a receiver that works instead of one that fails.
const NotificationsPath = "/notifications/"

// maxNotificationBytes bounds one notification's body; Alertmanager's are
// a few kilobytes per alert and its groups are small.
const maxNotificationBytes = 1 << 20

// notification is the part of Alertmanager's webhook payload (version 4)
// the log shows.
type notification struct {
	Receiver string `json:"receiver"`
	Alerts   []struct {
		Status string            `json:"status"`
		Labels map[string]string `json:"labels"`
	} `json:"alerts"`
}

func (s *Simulator) serveNotification(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST an Alertmanager webhook notification", http.StatusMethodNotAllowed)
		return
	}
	var n notification
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxNotificationBytes)).Decode(&n); err != nil {
		http.Error(w, "not an Alertmanager webhook notification: "+err.Error(), http.StatusBadRequest)
		return
	}
	for _, a := range n.Alerts {
		level.Info(s.logger).Log("msg", "Alertmanager notification", "receiver", n.Receiver, "status", a.Status,
			"alertname", a.Labels["alertname"], "severity", a.Labels["severity"], "address", a.Labels["address"], "source", a.Labels["source"])
	}
	w.WriteHeader(http.StatusOK)
}
