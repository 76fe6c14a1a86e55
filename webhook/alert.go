// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/strictjson"
)

// Alert is an accepted alert.created body (spec section 6). Values are as
// the signed sender wrote them; only their presence and types are checked
// here (the handler checks an address it does not watch).
type Alert struct {
	Event        string    `json:"event"`
	Severity     string    `json:"severity"`
	Address      string    `json:"address"`
	Source       string    `json:"source"`
	Summary      string    `json:"summary"`
	Delta        Delta     `json:"delta"`
	ObservedAt   time.Time `json:"observed_at"`
	DashboardURL string    `json:"dashboard_url"`
}

// Delta is the change since the prior sweep.
type Delta struct {
	PreviousCount      int64    `json:"previous_count"`
	NewCount           int64    `json:"new_count"`
	NewSourceDBs       []string `json:"new_source_dbs"`
	NewlyExposedFields []string `json:"newly_exposed_fields"`
	HasNewPlaintext    bool     `json:"has_new_plaintext"`
	IsFirstScan        bool     `json:"is_first_scan"`
}

// alertNames are the spec's member names of alert.created and its delta.
var alertNames = []string{"event", "severity", "address", "source", "summary", "delta", "observed_at", "dashboard_url",
	"previous_count", "new_count", "new_source_dbs", "newly_exposed_fields", "has_new_plaintext", "is_first_scan"}

// envelope is the part every event shares: the event name decides how the
// rest is read, so a future event type is not judged by alert.created's
// shape.
type envelope struct {
	Event string `json:"event"`
}

// wireAlert distinguishes an absent delta from an empty one and keeps the
// timestamp as text so its parse error is ours, not one quoting the body.
type wireAlert struct {
	Event        string `json:"event"`
	Severity     string `json:"severity"`
	Address      string `json:"address"`
	Source       string `json:"source"`
	Summary      string `json:"summary"`
	Delta        *Delta `json:"delta"`
	ObservedAt   string `json:"observed_at"`
	DashboardURL string `json:"dashboard_url"`
}

// parseBody reads a verified body: its event name, and for alert.created
// the alert. Required for every event: a JSON object with a non-empty string
// `event`. Required for alert.created (present and, for strings, non-empty):
// severity, address, source, observed_at and delta (an object); summary,
// dashboard_url and every delta member are optional, and unknown members are
// ignored, so additions on the sender's side pass.
//
// The body is decoded once as an alert; only when that fails is it decoded
// again for its event name alone, so that a future event of another shape is
// not judged by alert.created's. Before either, member names are held to
// the spec's exactly (strictjson): a duplicate member or a case variant
// ("SEVERITY" beside "severity") is malformed, not a value encoding/json
// would pick silently. A body of the form the service sends is read in one
// pass instead (scanAlert), to the same result.
func parseBody(body []byte) (string, Alert, error) {
	if w, ok := scanAlert(body); ok {
		return readAlert(w)
	}
	w, err := decodeAlert(body)
	if err != nil {
		return "", Alert{}, err
	}
	return readAlert(w)
}

// decodeAlert is the general path of parseBody: strictjson's check of the
// member names, then encoding/json.
func decodeAlert(body []byte) (wireAlert, error) {
	if err := strictjson.Check(body, alertNames...); err != nil {
		return wireAlert{}, err
	}
	var w wireAlert
	if err := json.Unmarshal(body, &w); err != nil {
		var env envelope
		if json.Unmarshal(body, &env) != nil || env.Event == breach.EventAlertCreated {
			return wireAlert{}, describeJSONError(err)
		}
		w = wireAlert{Event: env.Event}
	}
	return w, nil
}

// readAlert checks a decoded body for the members its event requires.
func readAlert(w wireAlert) (string, Alert, error) {
	if w.Event == "" {
		return "", Alert{}, errors.New("missing field event")
	}
	if w.Event != breach.EventAlertCreated {
		return w.Event, Alert{}, nil
	}
	for _, f := range []struct{ name, value string }{
		{"severity", w.Severity},
		{"address", w.Address},
		{"source", w.Source},
		{"observed_at", w.ObservedAt},
	} {
		if f.value == "" {
			return "", Alert{}, fmt.Errorf("missing field %s", f.name)
		}
	}
	if w.Delta == nil {
		return "", Alert{}, errors.New("missing field delta")
	}
	// The spec's shape is YYYY-MM-DDTHH:MM:SSZ; any RFC 3339 time (fraction,
	// offset) is accepted as well since it is just as unambiguous.
	observedAt, err := time.Parse(time.RFC3339, w.ObservedAt)
	if err != nil {
		return "", Alert{}, errors.New("observed_at is not an RFC 3339 timestamp")
	}
	return breach.EventAlertCreated, Alert{
		Event:        breach.EventAlertCreated,
		Severity:     w.Severity,
		Address:      w.Address,
		Source:       w.Source,
		Summary:      w.Summary,
		Delta:        *w.Delta,
		ObservedAt:   observedAt.UTC(),
		DashboardURL: w.DashboardURL,
	}, nil
}

// describeJSONError says what is wrong without quoting the body, which must
// not reach the logs.
func describeJSONError(err error) error {
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("invalid JSON at byte %d", syntaxErr.Offset)
	case errors.As(err, &typeErr) && typeErr.Field != "":
		return fmt.Errorf("field %s has the wrong type", typeErr.Field)
	case errors.As(err, &typeErr):
		return errors.New("body is not a JSON object")
	default:
		return errors.New("invalid JSON")
	}
}
