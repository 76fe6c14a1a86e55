// SPDX-License-Identifier: Apache-2.0

//go:build e2e

package e2e

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
)

// notification is the part of Alertmanager's webhook payload (version 4)
// the test checks.
type notification struct {
	Path        string            `json:"-"` // the URL path it was posted to
	Receiver    string            `json:"receiver"`
	Status      string            `json:"status"`
	GroupLabels map[string]string `json:"groupLabels"`
	Alerts      []struct {
		Status      string            `json:"status"`
		Labels      map[string]string `json:"labels"`
		Annotations map[string]string `json:"annotations"`
	} `json:"alerts"`
}

// receiver stands in for the example's webhook receivers (chat or paging
// bridges) and records what Alertmanager posts.
type receiver struct {
	server *httptest.Server

	mu        sync.Mutex
	got       []notification
	malformed []string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{}
	r.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var n notification
		err := json.NewDecoder(req.Body).Decode(&n)
		n.Path = req.URL.Path
		r.mu.Lock()
		if err != nil {
			r.malformed = append(r.malformed, req.URL.Path+": "+err.Error())
		} else {
			r.got = append(r.got, n)
		}
		r.mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.server.Close)
	return r
}

func (r *receiver) notifications() (got []notification, malformed []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got), slices.Clone(r.malformed)
}
