// SPDX-License-Identifier: Apache-2.0

package config

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Problem is one thing wrong with a configuration: what and where. Its
// message starts with the field path (api.timeout, addresses[2].alias), so
// whoever reads it knows what to edit even where the line is unknown.
type Problem struct {
	File string // the configuration file
	Line int    // 1-based line in File; 0 when unknown
	Msg  string
}

func (p Problem) Error() string {
	switch {
	case p.File != "" && p.Line > 0:
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Msg)
	case p.File != "":
		return fmt.Sprintf("%s: %s", p.File, p.Msg)
	case p.Line > 0:
		return fmt.Sprintf("line %d: %s", p.Line, p.Msg)
	}
	return p.Msg
}

// Problems is every problem one load found, in the order of the file. As an
// error it prints one problem a line; errors.As finds the list and
// errors.Is/As look into each problem.
type Problems []Problem

func (ps Problems) Error() string {
	lines := make([]string, len(ps))
	for i, p := range ps {
		lines[i] = p.Error()
	}
	return strings.Join(lines, "\n")
}

// MaxProblems is how many problems one load reports; a last one counts the
// rest. A generated file gone wrong can have one problem a line, and the
// reload's answer and the log must not be as long as the file.
const MaxProblems = 50

// capped keeps the first MaxProblems and counts the rest.
func (ps Problems) capped() Problems {
	if len(ps) <= MaxProblems {
		return ps
	}
	return append(ps[:MaxProblems:MaxProblems], Problem{File: ps[0].File, Msg: fmt.Sprintf("and %d more problems not shown", len(ps)-MaxProblems)})
}

// maxEchoBytes bounds a value of the file (a key, a string, a path) that a
// problem repeats: enough to recognise it, while a 5,000-byte value does
// not make a 5,000-byte problem, log line and /-/reload answer. The
// problem says which field it is, and the file has the whole value.
const maxEchoBytes = 128

// echo is a value of the file as a problem repeats it: with %q or %s, at
// most maxEchoBytes of it (cut at a character), an ellipsis marking a cut.
type echo string

// Format implements fmt.Formatter.
func (e echo) Format(f fmt.State, verb rune) {
	s := string(e)
	if len(s) > maxEchoBytes {
		cut := maxEchoBytes
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	if verb == 'q' {
		s = strconv.Quote(s)
	}
	io.WriteString(f, s)
}

// Unwrap lets errors.Is and errors.As see each problem.
func (ps Problems) Unwrap() []error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = p
	}
	return errs
}

// problemsOf flattens err (a Problems, an errors.Join or a single error)
// into problems. Each check reports through the one fail function of
// Validate, or returns a plain error whose message starts with a field path;
// nothing else needs to know about Problem.
func problemsOf(err error) Problems {
	if err == nil {
		return nil
	}
	var ps Problems
	if errors.As(err, &ps) {
		return ps
	}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		var out Problems
		for _, e := range joined.Unwrap() {
			out = append(out, problemsOf(e)...)
		}
		return out
	}
	return Problems{{Msg: err.Error()}}
}

// lineIndex maps a field path (api.timeout, addresses[2]) to the line of
// its key or item in the file, so that a problem found after decoding (a
// range, a duplicate, an unreadable file) can say where it is too.
type lineIndex map[string]int

// fieldPath is the leading "path:" of a problem's message.
var fieldPath = regexp.MustCompile(`^([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)*):`)

// lineOf returns the line of the field a message starts with, or of the
// nearest enclosing field the file has (a missing api.base_url is reported
// at api), or 0.
func (l lineIndex) lineOf(msg string) int {
	m := fieldPath.FindStringSubmatch(msg)
	if m == nil {
		return 0
	}
	for path := m[1]; path != ""; path = parentPath(path) {
		if line, ok := l[path]; ok {
			return line
		}
	}
	return 0
}

func parentPath(path string) string {
	if i := strings.LastIndexAny(path, ".["); i > 0 {
		return path[:i]
	}
	return ""
}

// place gives each problem its file and, where it has none, the line of
// its field; then sorts them by line, those without one last.
func (ps Problems) place(file string, lines lineIndex) Problems {
	for i := range ps {
		ps[i].File = file
		if ps[i].Line == 0 {
			ps[i].Line = lines.lineOf(ps[i].Msg)
		}
	}
	sort.SliceStable(ps, func(i, j int) bool {
		a, b := ps[i].Line, ps[j].Line
		if a == 0 || b == 0 {
			return a != 0 && b == 0
		}
		return a < b
	})
	return ps
}
