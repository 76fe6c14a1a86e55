// SPDX-License-Identifier: Apache-2.0

package addrfile

import (
	"crypto/sha256"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// MaxFilesPerGlob is how many files one glob reads, in name order; the
// others are counted (breach_exporter_address_files_over_limit) and not
// read. Every file is a value of the file label of five series, so the
// number of files bounds those series; a department a file, a hundred is
// far more than an organisation's export makes.
const MaxFilesPerGlob = 100

// MaxLoggedLines is how many invalid lines of one file a read reports;
// the count of all of them is a metric.
const MaxLoggedLines = 20

// File is one file's addresses, from its last good content.
type File struct {
	Path      string
	Addresses []breach.Address
}

// Read is what one read of the globs found.
type Read struct {
	// Files are the matched files, in glob order and then name order, each
	// with its last good content (none if it never read well).
	Files []File
	// Changed is true when the addresses of any file, or the set of
	// files, differ from the read before.
	Changed bool
	// Invalid are the skipped lines of the files whose content changed, at
	// most MaxLoggedLines a file: what to log once, not on every read.
	Invalid []LineError
	// Failed are the files that failed this time (each error names its
	// path); they kept their last good content.
	Failed []error
	// OverLimit counts the files the globs matched past MaxFilesPerGlob.
	OverLimit int
}

// Source reads the files of one set of globs and keeps, per file, its last
// good content and the figures its metrics show. Read and Merge are for
// one goroutine at a time; the metrics read it concurrently.
type Source struct {
	mu        sync.Mutex
	files     map[string]*fileState // by path
	order     []string              // the paths of the last read, in its order
	overLimit int
	globs     bool // the last read had globs: only then are there metrics
	// sd: the files are in file_sd shape (ParseSD), whose labels may be
	// allowed, the config's owner_labels (Allow).
	sd      bool
	allowed []string
	// labels are the owner labels of the addresses of the files each glob
	// matches, by glob (SetLabels): addresses_files with labels.
	labels map[string][]breach.Label
}

type fileState struct {
	// sum is the SHA-256 of the last good content: the same bytes again
	// are not parsed again, so a change to one file of many parses that
	// one alone.
	sum        [sha256.Size]byte
	badSum     [sha256.Size]byte // the last content that failed to parse
	addresses  []breach.Address
	labels     []breach.Label // its glob's (SetLabels)
	invalid    int
	duplicates int // set by Merge
	errors     float64
	success    time.Time
	// failed: the last read failed. Files are read only at start, on a
	// reload and when one changes, so neither the error count nor the
	// last success says whether a file is broken now; this does.
	failed bool
}

// NewSource returns a Source that has read nothing; m (nil: none) shows
// its metrics.
func NewSource(m *Metrics) *Source {
	s := &Source{files: map[string]*fileState{}}
	if m != nil {
		m.add(s)
	}
	return s
}

// NewSDSource returns a Source of files in file_sd shape
// (addresses_sd_files); m as NewSource's.
func NewSDSource(m *Metrics) *Source {
	s := NewSource(m)
	s.sd = true
	return s
}

// Allow sets the label names the files of an SD Source may carry, for
// the next Read: a change parses every file again.
func (s *Source) Allow(names []string) { s.allowed = slices.Clone(names) }

// SetLabels sets the owner labels of the addresses of the files each glob
// matches, by glob, for the next Read: an address of such a file without
// labels of its own (a plain list has none) has its glob's.
func (s *Source) SetLabels(byGlob map[string][]breach.Label) { s.labels = byGlob }

// content is what a file's parse depends on: its bytes and, in file_sd
// shape, the allowed label names.
func (s *Source) content(data []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(data)
	if s.sd {
		h.Write([]byte{0})
		h.Write([]byte(strings.Join(s.allowed, ",")))
	}
	return [sha256.Size]byte(h.Sum(nil))
}

// parse is Parse or ParseSD, by the Source's kind.
func (s *Source) parse(path string, data []byte, show bool) ([]breach.Address, []LineError, error) {
	if s.sd {
		return ParseSD(path, data, show, s.allowed)
	}
	return Parse(path, data, show)
}

// Read reads every file globs match, now. The globs' directories hold no
// wildcards and each glob is valid (the config checks both), so no glob
// fails; a directory a glob matches (Kubernetes's ..data, for one) is no
// address file and is passed over. show is Parse's.
//
// Reading and parsing hold no lock; only the swap of the results does, so
// the metrics never wait for a slow file.
func (s *Source) Read(globs []string, now time.Time, show bool) Read {
	var r Read
	paths, matchedBy := s.match(globs, &r.OverLimit)

	s.mu.Lock()
	old := s.files
	s.mu.Unlock()

	next := make(map[string]*fileState, len(paths))
	r.Changed = !slices.Equal(paths, s.order)
	for _, path := range paths {
		st := &fileState{}
		if prev := old[path]; prev != nil {
			*st = *prev
		}
		if labels := s.labels[matchedBy[path]]; !slices.Equal(labels, st.labels) {
			st.labels, r.Changed = labels, true
		}
		data, err := fileread.Read(path, s.limit(path))
		sum := s.content(data)
		var (
			addrs   []breach.Address
			invalid []LineError
		)
		switch {
		case err == nil && sum == st.sum && !st.success.IsZero():
			st.success = now // the last good content, unchanged
		case err == nil:
			addrs, invalid, err = s.parse(path, data, show)
			if err != nil {
				err = &os.PathError{Op: "parse", Path: path, Err: err}
			}
		}
		st.failed = err != nil
		switch {
		case err != nil:
			st.errors++
			r.Failed = append(r.Failed, err)
			// A file with no valid line at all: its lines say why, once
			// per content, as for a good file.
			if len(invalid) > 0 && sum != st.badSum {
				st.badSum = sum
				r.Invalid = append(r.Invalid, invalid[:min(len(invalid), MaxLoggedLines)]...)
			}
		case addrs == nil: // unchanged
		default:
			st.sum = sum
			if !slices.EqualFunc(addrs, st.addresses, breach.Address.Equal) || len(invalid) != st.invalid {
				r.Changed = true
				r.Invalid = append(r.Invalid, invalid[:min(len(invalid), MaxLoggedLines)]...)
			}
			st.addresses, st.invalid, st.success = addrs, len(invalid), now
		}
		next[path] = st
		r.Files = append(r.Files, File{Path: path, Addresses: st.addresses})
	}

	s.mu.Lock()
	s.files, s.order, s.overLimit, s.globs = next, paths, r.OverLimit, len(globs) > 0
	s.mu.Unlock()
	return r
}

// match returns the files the globs match, each once (the first glob that
// matches it has it: matchedBy), at most MaxFilesPerGlob a glob; overLimit
// counts those left out.
func (s *Source) match(globs []string, overLimit *int) (paths []string, matchedBy map[string]string) {
	seen := map[string]bool{}
	matchedBy = map[string]string{}
	for _, glob := range globs {
		matches, _ := filepath.Glob(glob) // sorted; ErrBadPattern is the config's to refuse
		n := 0
		for _, path := range matches {
			if seen[path] {
				continue
			}
			if info, err := os.Stat(path); err == nil && info.IsDir() {
				continue
			}
			if n == MaxFilesPerGlob {
				*overLimit++
				continue
			}
			n++
			seen[path] = true
			paths = append(paths, path)
			matchedBy[path] = glob
		}
	}
	return paths, matchedBy
}

// Merge returns configured and then the addresses of the last Read's files
// that no earlier source (configured, an earlier file, an earlier line)
// has, compared case-insensitively (breach.Key): the first wins. Each
// file's duplicates are counted for its metrics. Linear in the number of
// addresses.
func (s *Source) Merge(configured []breach.Address) []breach.Address {
	seen := make(map[string]string, len(configured))
	for _, a := range configured {
		seen[a.Key()] = ""
	}
	out, _ := s.MergeInto(seen, "", slices.Clone(configured))
	return out
}

// Elsewhere is how many addresses of a file were already an owner's (an
// account's: another one, or the file's own from an earlier source): they
// stay where they were first, with that source's owner labels.
type Elsewhere struct {
	File      string // or the URL of an HTTP source
	Owner     string // the owner that has them
	Addresses int
}

// MergeInto appends to out the addresses of the last Read's files whose
// key is not in seen yet, and adds their keys to it with owner: several
// Sources (one per account) merge into one list in linear time, each
// address going to the first source that has it. Each file's duplicates
// are counted for its metrics and also returned, one Elsewhere a file
// and owner, in file order.
func (s *Source) MergeInto(seen map[string]string, owner string, out []breach.Address) ([]breach.Address, []Elsewhere) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var elsewhere []Elsewhere
	for _, path := range s.order {
		st := s.files[path]
		var others map[string]int
		out, st.duplicates, others = MergeList(seen, owner, out, st.addresses, st.labels)
		elsewhere = AppendElsewhere(elsewhere, path, others)
	}
	return out, elsewhere
}

// MergeList appends to out the addresses of list whose key is not in seen
// yet, each without labels of its own with labels, and adds their keys to
// it with owner: MergeInto's step for one list, which the HTTP sources
// (internal/addrhttp) share. It returns how many of list were in seen
// already, and how many of those each owner has.
func MergeList(seen map[string]string, owner string, out, list []breach.Address, labels []breach.Label) (_ []breach.Address, duplicates int, others map[string]int) {
	others = map[string]int{}
	for _, a := range list {
		k := a.Key()
		if first, dup := seen[k]; dup {
			duplicates++
			others[first]++
			continue
		}
		seen[k] = owner
		if a.Labels == nil {
			a.Labels = labels
		}
		out = append(out, a)
	}
	return out, duplicates, others
}

// AppendElsewhere appends to elsewhere one Elsewhere for source (a file,
// a URL) and each owner of others, in owner order.
func AppendElsewhere(elsewhere []Elsewhere, source string, others map[string]int) []Elsewhere {
	for _, o := range slices.Sorted(maps.Keys(others)) {
		elsewhere = append(elsewhere, Elsewhere{File: source, Owner: o, Addresses: others[o]})
	}
	return elsewhere
}
