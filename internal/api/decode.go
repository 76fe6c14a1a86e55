package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// decodeMe decodes a /me body.
func decodeMe(body []byte) (Me, error) {
	var m *Me
	if err := json.Unmarshal(body, &m); err != nil {
		return Me{}, fmt.Errorf("decoding me body: %w", err)
	}
	switch {
	case m == nil:
		return Me{}, errors.New("/me body is null, want a JSON object")
	case m.Plan == "":
		return Me{}, errors.New("/me body has no plan")
	}
	return *m, nil
}

// wireSource is BreachSourceState as the spec writes it. time.Time's JSON
// decoding takes RFC 3339 with or without fractional seconds, which covers
// the spec's millisecond form and its absence.
type wireSource struct {
	Source               string    `json:"source"`
	BreachCount          int64     `json:"breach_count"`
	SourceDBs            []string  `json:"source_dbs"`
	FieldsExposed        []string  `json:"fields_exposed"`
	HasPlaintextPassword bool      `json:"has_plaintext_password"`
	LastScannedAt        time.Time `json:"last_scanned_at"`
	LastChangedAt        time.Time `json:"last_changed_at"`
}

// decodeBreaches decodes a /breaches body for the address asked about.
func decodeBreaches(body []byte, email string) (Breaches, error) {
	var w *struct {
		Email   string       `json:"email"`
		Sources []wireSource `json:"sources"`
	}
	if err := json.Unmarshal(body, &w); err != nil {
		return Breaches{}, fmt.Errorf("decoding breaches body: %w", err)
	}
	if w == nil {
		return Breaches{}, errors.New("/breaches body is null, want a JSON object")
	}
	b := Breaches{Email: strings.TrimSpace(w.Email), Sources: make([]breach.SourceState, len(w.Sources))}
	for i, s := range w.Sources {
		// A nameless entry could only be exported under an empty label.
		if s.Source == "" {
			return Breaches{}, fmt.Errorf("/breaches sources[%d] has no source", i)
		}
		b.Sources[i] = breach.SourceState(s)
	}
	// An answer about another address must not be stored under this one.
	if !strings.EqualFold(b.Email, strings.TrimSpace(email)) {
		return Breaches{}, errors.New("/breaches answered for another address than the one asked about")
	}
	return b, nil
}
