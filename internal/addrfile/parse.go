// SPDX-License-Identifier: Apache-2.0

// Package addrfile reads the address lists that come from files (an HR or
// directory export, one file per department) rather than from the config:
// the files a set of globs matches, each one address a line or, ending in
// .yml or .yaml, a YAML list. A file that fails keeps its last good
// content (Source), as Prometheus's file_sd keeps a broken target file's;
// Merge joins the lists with the configured addresses. When to read again
// is internal/filewatch's to say.
//
// It knows nothing of where the globs come from (the top level of the
// config, or one account's), so each set of globs gets a Source of its own.
package addrfile

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// LineError is an invalid line of a file: skipped, the rest of the file
// stands.
type LineError struct {
	File   string
	Line   int
	Reason string // never the address, unless the Source shows addresses
}

func (e LineError) Error() string {
	return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason)
}

// ErrNoAddress is why a file with no valid line at all is refused: a file
// truncated or emptied by a writer that failed looks just like that, and
// its last good content is a better guess than none. Deleting the file is
// how its addresses are removed.
var ErrNoAddress = errors.New("no valid address in the file (delete the file to stop watching its addresses)")

// IsYAML reports whether path is read as a YAML list.
func IsYAML(path string) bool {
	return strings.HasSuffix(path, ".yml") || strings.HasSuffix(path, ".yaml")
}

// limit is the size limit of path's kind (fileread): a file in file_sd
// shape, JSON or YAML, is parsed into nodes as a YAML list is.
func (s *Source) limit(path string) int64 {
	if s.sd || IsYAML(path) {
		return fileread.MaxAddressYAMLBytes
	}
	return fileread.MaxAddressListBytes
}

// Parse returns the addresses of a file's contents, in file order, and its
// invalid lines. Its error (the file then counts as failed) says why the
// file as a whole is not usable: not UTF-8 text, not a YAML list, or no
// valid address at all. show puts an invalid line's text in its reason:
// only where labels show addresses anyway (labels.address email).
func Parse(path string, data []byte, show bool) ([]breach.Address, []LineError, error) {
	if !utf8.Valid(data) {
		return nil, nil, errors.New("not valid UTF-8 text")
	}
	var (
		addrs   []breach.Address
		invalid []LineError
	)
	add := func(line int, text string) {
		if breach.ValidEmail(text) {
			addrs = append(addrs, breach.Address{Email: text})
			return
		}
		reason := "not a valid email address"
		if show {
			reason = strconv.Quote(text) + " is " + reason
		}
		invalid = append(invalid, LineError{File: path, Line: line, Reason: reason})
	}
	if IsYAML(path) {
		if err := parseYAML(path, data, add, &invalid); err != nil {
			return nil, nil, err
		}
	} else {
		parseLines(data, add)
	}
	if len(addrs) == 0 {
		return nil, invalid, ErrNoAddress
	}
	return addrs, invalid, nil
}

// parseLines calls add with each line that is neither blank nor a
// comment. A comment starts with # at the start of a line or after a space
// (an address holds no space, so it cannot hold such a #).
func parseLines(data []byte, add func(line int, text string)) {
	line := 0
	for rest := string(data); rest != ""; {
		var text string
		text, rest, _ = strings.Cut(rest, "\n")
		line++
		if i := commentStart(text); i >= 0 {
			text = text[:i]
		}
		if text = strings.TrimSpace(text); text != "" {
			add(line, text)
		}
	}
}

func commentStart(s string) int {
	for i := range len(s) {
		if s[i] == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t') {
			return i
		}
	}
	return -1
}

// parseYAML calls add with each string item of the list data holds; an
// item of another kind is an invalid line. An empty document is a list
// with no address.
func parseYAML(path string, data []byte, add func(line int, text string), invalid *[]LineError) error {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("not valid YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if len(doc.Content) == 0 {
		return nil
	}
	list := doc.Content[0]
	if list.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: must be a YAML list of addresses", list.Line)
	}
	for _, item := range list.Content {
		if item.Kind != yaml.ScalarNode || item.Tag != "!!str" {
			*invalid = append(*invalid, LineError{File: path, Line: item.Line, Reason: "not an address: must be a string"})
			continue
		}
		add(item.Line, strings.TrimSpace(item.Value))
	}
	return nil
}
