// SPDX-License-Identifier: Apache-2.0

// Package strictjson holds JSON from outside to exact member names.
// encoding/json matches a member to a struct field case-insensitively and
// lets the last of two equal members win, so {"breach_count":5,
// "BREACH_COUNT":777} decodes as 777 without an error. Check is a pass over
// the member names before that decoding: with no duplicates and no case
// variants of the names a decoder looks for, its case-insensitive match can
// only take the exact name.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of objects and arrays. The spec's documents
// nest four deep; the decoder's own limit is 10,000, and Check keeps a
// little state per level.
const MaxDepth = 64

// linearNames is how many member names of one object are compared one by
// one; an object with more gets a map, so that a hostile object of
// thousands of members costs linear time.
const linearNames = 16

// level is an open object or array.
type level struct {
	object bool
	first  int                 // where the object's names start in names
	many   map[string]struct{} // the object's names, past linearNames
}

// Check reports an error when data is not one JSON value, nests deeper than
// MaxDepth, or has an object, at any depth, with two members of the same
// name or with a member whose name equals one of names except in case (as
// Unicode case folding sees it, like encoding/json). Errors never quote the
// data: they name a member only when it is one of names or a case variant
// of one, and otherwise say where.
//
// encoding/json's validator vouches for the syntax first, so the pass over
// the bytes only follows strings and brackets; it allocates nothing for an
// object of up to linearNames members without escapes in their names
// (the webhook's and the API's bodies), where a pass over the decoder's
// tokens allocated for every token.
func Check(data []byte, names ...string) error {
	if !json.Valid(data) {
		return invalid(data)
	}
	var (
		stack      [MaxDepth]level
		depth      int
		seen       [][]byte // the names of the open objects, outermost first
		expectName bool     // the next string is a member name
	)
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '{', '[':
			if depth == MaxDepth {
				return fmt.Errorf("JSON nested deeper than %d levels", MaxDepth)
			}
			stack[depth] = level{object: c == '{', first: len(seen)}
			depth++
			expectName = c == '{'
		case '}', ']':
			depth--
			seen = seen[:stack[depth].first]
			expectName = false
		case ',':
			expectName = stack[depth-1].object
		case '"':
			end := closingQuote(data, i)
			if expectName {
				name, err := memberName(data[i : end+1])
				if err != nil {
					return err
				}
				if err := check(&stack[depth-1], seen[stack[depth-1].first:], name, names, end+1); err != nil {
					return err
				}
				seen = append(seen, name)
				expectName = false
			}
			i = end
		}
		// Anything else is a colon, white space or a literal: the value
		// after a name, which the validator vouched for.
	}
	return nil
}

// closingQuote is the index of the quote that ends the string opening at
// data[open].
func closingQuote(data []byte, open int) int {
	for i := open + 1; ; i++ {
		switch data[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
}

// memberName decodes a quoted name as encoding/json does; only one with
// escapes or invalid UTF-8 (which decodes to U+FFFD) is copied.
func memberName(quoted []byte) ([]byte, error) {
	raw := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw, nil
	}
	var name string
	if err := json.Unmarshal(quoted, &name); err != nil {
		return nil, errors.New("invalid JSON")
	}
	return []byte(name), nil
}

// check refuses name when its object already has it (earlier holds the
// object's names so far) or when it is a case variant of one of names.
func check(obj *level, earlier [][]byte, name []byte, names []string, offset int) error {
	dup := false
	if obj.many != nil {
		_, dup = obj.many[string(name)]
		obj.many[string(name)] = struct{}{}
	} else {
		dup = slices.ContainsFunc(earlier, func(n []byte) bool { return bytes.Equal(n, name) })
		if len(earlier) == linearNames {
			obj.many = make(map[string]struct{}, 2*linearNames)
			for _, n := range earlier {
				obj.many[string(n)] = struct{}{}
			}
			obj.many[string(name)] = struct{}{}
		}
	}
	if dup {
		if slices.Contains(names, string(name)) {
			return fmt.Errorf("member %q appears twice", name)
		}
		return fmt.Errorf("a member name appears twice in one object (before byte %d)", offset)
	}
	for _, n := range names {
		if string(name) != n && strings.EqualFold(string(name), n) {
			return fmt.Errorf("member %q is not %q: member names are case-sensitive", name, n)
		}
	}
	return nil
}

// invalid says why data is not one JSON value, without quoting it: a
// syntax error says where.
func invalid(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	var value json.RawMessage
	err := dec.Decode(&value)
	var syntaxErr *json.SyntaxError
	switch {
	case err == nil:
		return errors.New("data after the JSON value")
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("invalid JSON at byte %d", syntaxErr.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("truncated JSON")
	}
	return errors.New("invalid JSON")
}
