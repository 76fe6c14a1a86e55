// SPDX-License-Identifier: Apache-2.0

package persist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"github.com/go-kit/log/level"

	"github.com/breach-exporter/breach_exporter/internal/acknowledge"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// PageFileName is, inside --storage.path, the file of the acknowledgements
// made on the acknowledgement page (internal/ackweb).
//
// It is a file of its own, not a member of the state snapshot: the
// snapshot's reader refuses unknown members and versions whole (and moves
// the file aside), so a new member or version 5 would cost a release
// rolled back to the previous one its whole state. Beside the snapshot,
// the previous release does not read this file and keeps the snapshot:
// the page's acknowledgements are not in force under it, and are again
// once the newer release runs (the file stays while the older one runs).
const PageFileName = "breach_exporter.acknowledgements"

// pageVersion is the format of PageFileName written; a later release that
// changes its meaning writes 2, which this one refuses (the file is moved
// aside, logged, and the page starts empty; the snapshot is untouched).
const pageVersion = 1

// MaxPageEntries bounds the acknowledgements made on the page: the API
// refuses one more (internal/ackweb), and a file holding more is damaged.
// At about 600 bytes an entry the file stays under 6 MB.
const MaxPageEntries = 10000

type (
	pageFileV1 struct {
		Version   int           `json:"version"`
		WrittenAt time.Time     `json:"written_at"`
		Entries   []pageEntryV1 `json:"entries"`
	}
	pageEntryV1 struct {
		Address   string    `json:"address"`
		Source    string    `json:"source,omitempty"`
		HandledAt time.Time `json:"handled_at"`
		By        string    `json:"by"`
		Comment   string    `json:"comment,omitempty"`
	}
)

// EncodePage renders the page's acknowledgements as the file's bytes.
func EncodePage(entries []acknowledge.Entry, now time.Time) ([]byte, error) {
	f := pageFileV1{Version: pageVersion, WrittenAt: now.UTC(), Entries: make([]pageEntryV1, len(entries))}
	for i, e := range entries {
		f.Entries[i] = pageEntryV1{Address: e.Address, Source: e.Source, HandledAt: e.HandledAt.UTC(), By: e.By, Comment: e.Comment}
	}
	return framed(f)
}

// DecodePage reads the file's bytes; each entry is checked as the file's
// are (acknowledge.Entry.Check, at now). Any problem refuses the file whole.
func DecodePage(data []byte, now time.Time) ([]acknowledge.Entry, error) {
	body, _, err := unframed(data, pageVersion)
	if err != nil {
		return nil, err
	}
	var f pageFileV1
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if len(f.Entries) > MaxPageEntries {
		return nil, fmt.Errorf("%d entries, more than the %d the page keeps", len(f.Entries), MaxPageEntries)
	}
	out := make([]acknowledge.Entry, len(f.Entries))
	for i, p := range f.Entries {
		e := acknowledge.Entry{Address: p.Address, Source: p.Source, HandledAt: p.HandledAt, By: p.By, Comment: p.Comment, Page: true}
		if err := e.Check(now); err != nil {
			return nil, fmt.Errorf("entries[%d]: %w", i, err)
		}
		out[i] = e
	}
	return out, nil
}

// SavePage writes the page's acknowledgements atomically, before the
// change is answered: a page-made acknowledgement the API confirmed
// survives a crash.
func (s *Folder) SavePage(entries []acknowledge.Entry, now time.Time) error {
	data, err := EncodePage(entries, now)
	if err == nil {
		err = write(s.folder.root, PageFileName, data)
	}
	if err == nil {
		err = s.folder.check()
	}
	if err != nil {
		return fmt.Errorf("writing the page's acknowledgements to %s: %w", s.folder.path, err)
	}
	return nil
}

// LoadPage reads the page's acknowledgements; none without the file. A
// file that cannot be used is logged, counted with the snapshots that
// cannot (breach_exporter_state_load_failures_total) and moved aside: the
// page starts empty, the file's acknowledgements stay in force.
func (s *Folder) LoadPage(now time.Time) []acknowledge.Entry {
	data, err := fileread.ReadIn(s.folder.root, PageFileName, fileread.MaxPageAcknowledgementsBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		var entries []acknowledge.Entry
		if entries, err = DecodePage(data, now); err == nil {
			return entries
		}
	}
	s.loadFailures.Inc()
	path := filepath.Join(s.folder.path, PageFileName)
	if mvErr := s.folder.root.Rename(PageFileName, PageFileName+".corrupt"); mvErr != nil {
		level.Error(s.logger).Log("msg", "The page's acknowledgements cannot be read nor moved aside; the page starts empty", "file", path, "err", err, "move_err", mvErr)
		return nil
	}
	level.Error(s.logger).Log("msg", "The page's acknowledgements cannot be read; moved aside, the page starts empty", "file", path, "moved_to", path+".corrupt", "err", err)
	return nil
}
