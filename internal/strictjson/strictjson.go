// Package strictjson holds JSON from outside to exact member names.
// encoding/json matches a member to a struct field case-insensitively and
// lets the last of two equal members win, so {"breach_count":5,
// "BREACH_COUNT":777} decodes as 777 without an error. Check is a pass over
// the tokens before that decoding: with no duplicates and no case variants
// of the names a decoder looks for, its case-insensitive match can only
// take the exact name.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
)

// MaxDepth bounds the nesting of objects and arrays. The spec's documents
// nest four deep; the decoder's own limit is 10,000, and Check keeps a
// little state per level.
const MaxDepth = 64

// Check reports an error when data is not one JSON value, nests deeper than
// MaxDepth, or has an object, at any depth, with two members of the same
// name or with a member whose name equals one of names except in case (as
// Unicode case folding sees it, like encoding/json). Errors never quote the
// data: they name a member only when it is one of names or a case variant
// of one, and otherwise say where.
func Check(data []byte, names ...string) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	// One entry per open object (its member names so far) or array (nil).
	var open []map[string]bool
	inObject := func() bool { return len(open) > 0 && open[len(open)-1] != nil }
	expectName := false // the next token is a name or the end of an object
	for {
		tok, err := dec.Token()
		if err != nil {
			return describe(err)
		}
		switch {
		case tok == json.Delim('{') || tok == json.Delim('['):
			if len(open) == MaxDepth {
				return fmt.Errorf("JSON nested deeper than %d levels", MaxDepth)
			}
			var members map[string]bool
			if tok == json.Delim('{') {
				members = map[string]bool{}
			}
			open = append(open, members)
			expectName = inObject()
		case tok == json.Delim('}') || tok == json.Delim(']'):
			open = open[:len(open)-1]
			expectName = inObject()
		case expectName:
			if err := checkName(open[len(open)-1], tok.(string), names, dec.InputOffset()); err != nil {
				return err
			}
			expectName = false // its value comes next
		default: // a scalar value
			expectName = inObject()
		}
		if len(open) == 0 {
			break
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

func checkName(seen map[string]bool, name string, names []string, offset int64) error {
	if seen[name] {
		if slices.Contains(names, name) {
			return fmt.Errorf("member %q appears twice", name)
		}
		return fmt.Errorf("a member name appears twice in one object (before byte %d)", offset)
	}
	seen[name] = true
	for _, n := range names {
		if name != n && strings.EqualFold(name, n) {
			return fmt.Errorf("member %q is not %q: member names are case-sensitive", name, n)
		}
	}
	return nil
}

// describe keeps decoder errors free of the data: a syntax error says where.
func describe(err error) error {
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("invalid JSON at byte %d", syntaxErr.Offset)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return errors.New("truncated JSON")
	}
	return errors.New("invalid JSON")
}
