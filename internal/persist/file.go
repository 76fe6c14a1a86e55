// Package persist keeps the exporter's state across a restart, as
// Alertmanager keeps its silences: a snapshot file written atomically (a
// temporary file in the same folder, synced, renamed over the old one, the
// folder synced), at most every interval and only when something changed,
// and once at shutdown; read at start before the listeners open.
//
// The file is a line with the SHA-256 of the rest, then versioned JSON. A
// file that is truncated, damaged, of an unknown version or that breaks the
// spec's shapes is refused whole: the caller moves it aside and starts
// empty, never crash-loops.
package persist

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/registry"
	"github.com/breach-exporter/breach_exporter/webhook"
)

// FileName is the snapshot's name inside --storage.path.
const FileName = "breach_exporter.snapshot"

// version is the format written; Read accepts only it.
const version = 1

// State is what a snapshot holds.
type State struct {
	Registry registry.Saved
	// Seen is the webhook's duplicate memory: digests of accepted bodies.
	Seen []webhook.Remembered
}

// The wire form. Field names are the file's, stable across versions of
// the code; a change of meaning needs a new version.
type (
	fileV1 struct {
		Version   int         `json:"version"`
		WrittenAt time.Time   `json:"written_at"`
		Plan      string      `json:"plan,omitempty"` // the last /me answer's plan
		Addresses []addressV1 `json:"addresses"`
		Seen      []seenV1    `json:"seen"`
	}
	addressV1 struct {
		Email       string     `json:"email"`
		Discovered  bool       `json:"discovered,omitempty"`
		State       string     `json:"state"`
		Sources     []sourceV1 `json:"sources,omitempty"`
		LastRefresh time.Time  `json:"last_refresh"`
		LastAttempt time.Time  `json:"last_attempt"`
		Failures    int        `json:"failures,omitempty"`
	}
	sourceV1 struct {
		Source               string    `json:"source"`
		BreachCount          int64     `json:"breach_count"`
		SourceDBs            []string  `json:"source_dbs"`
		FieldsExposed        []string  `json:"fields_exposed"`
		HasPlaintextPassword bool      `json:"has_plaintext_password"`
		LastScannedAt        time.Time `json:"last_scanned_at"`
		LastChangedAt        time.Time `json:"last_changed_at"`
	}
	seenV1 struct {
		Digest string    `json:"digest"`
		At     time.Time `json:"at"`
	}
)

// Encode renders st as a snapshot file's bytes.
func Encode(st State, now time.Time) ([]byte, error) {
	f := fileV1{Version: version, WrittenAt: now.UTC(), Plan: st.Registry.Account.Plan,
		Addresses: make([]addressV1, len(st.Registry.Entries)), Seen: make([]seenV1, len(st.Seen))}
	for i, e := range st.Registry.Entries {
		a := addressV1{Email: e.Address.Email, Discovered: e.Address.Discovered, State: e.State,
			LastRefresh: e.LastRefresh, LastAttempt: e.LastAttempt, Failures: e.Failures}
		for _, s := range e.Sources {
			a.Sources = append(a.Sources, sourceV1(s))
		}
		f.Addresses[i] = a
	}
	for i, s := range st.Seen {
		f.Seen[i] = seenV1{Digest: hex.EncodeToString(s.Digest[:]), At: s.At}
	}
	body, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(body)
	out := make([]byte, 0, 2*sha256.Size+1+len(body))
	out = hex.AppendEncode(out, sum[:])
	out = append(out, '\n')
	return append(out, body...), nil
}

// Decode reads a snapshot file's bytes. Any damage, an unknown version or a
// value outside what the exporter itself would have written is an error:
// the file is refused whole.
func Decode(data []byte) (State, error) {
	head, body, ok := bytes.Cut(data, []byte("\n"))
	if !ok || len(head) != 2*sha256.Size {
		return State{}, errors.New("no checksum line: not a snapshot, or truncated")
	}
	var want [sha256.Size]byte
	if _, err := hex.Decode(want[:], head); err != nil {
		return State{}, errors.New("the checksum line is not hexadecimal")
	}
	if sha256.Sum256(body) != want {
		return State{}, errors.New("checksum mismatch: truncated or damaged")
	}
	var probe struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return State{}, fmt.Errorf("not JSON: %w", err)
	}
	if probe.Version != version {
		return State{}, fmt.Errorf("version %d, this exporter reads version %d", probe.Version, version)
	}
	var f fileV1
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return State{}, fmt.Errorf("decoding: %w", err)
	}
	return f.state()
}

func (f *fileV1) state() (State, error) {
	st := State{Registry: registry.Saved{Account: registry.Account{Plan: breach.LabelValue(f.Plan, breach.MaxValueBytes)}}}
	seen := make(map[string]bool, len(f.Addresses))
	for i, a := range f.Addresses {
		if err := a.validate(); err != nil {
			return State{}, fmt.Errorf("addresses[%d]: %w", i, err)
		}
		k := breach.Key(a.Email)
		if seen[k] {
			return State{}, fmt.Errorf("addresses[%d]: %q appears twice", i, a.Email)
		}
		seen[k] = true
		e := registry.SavedEntry{Address: breach.Address{Email: a.Email, Discovered: a.Discovered}, State: a.State,
			LastRefresh: a.LastRefresh, LastAttempt: a.LastAttempt, Failures: a.Failures}
		for _, s := range a.Sources {
			e.Sources = append(e.Sources, breach.SourceState(s))
		}
		st.Registry.Entries = append(st.Registry.Entries, e)
	}
	for i, s := range f.Seen {
		var d webhook.Remembered
		if n, err := hex.Decode(d.Digest[:], []byte(s.Digest)); err != nil || n != sha256.Size || len(s.Digest) != 2*sha256.Size {
			return State{}, fmt.Errorf("seen[%d]: not a SHA-256 digest", i)
		}
		d.At = s.At
		st.Seen = append(st.Seen, d)
	}
	return st, nil
}

// validate holds a restored address to what the exporter writes: the
// bounds on what comes from outside apply to what comes back from disk.
func (a addressV1) validate() error {
	switch {
	case !breach.ValidEmail(a.Email):
		return errors.New("not a valid email address")
	case !breach.Known(breach.States, a.State):
		return fmt.Errorf("unknown state %q", breach.LabelValue(a.State, breach.MaxValueBytes))
	case a.State != breach.Verified && len(a.Sources) > 0:
		return fmt.Errorf("sources on a %s address", a.State)
	case a.Failures < 0:
		return errors.New("negative failure count")
	}
	for i, s := range a.Sources {
		switch {
		case s.Source == "":
			return fmt.Errorf("sources[%d]: no source", i)
		case s.BreachCount < 0:
			return fmt.Errorf("sources[%d]: negative breach_count", i)
		}
	}
	return nil
}

// Write replaces the snapshot in dir with data atomically: a crash at any
// moment leaves either the old complete file or the new one.
func Write(dir string, data []byte) error {
	tmp, err := os.CreateTemp(dir, FileName+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename this is a no-op
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err != nil {
		return err
	}
	// The rename is durable only once the folder's entry is.
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
