// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"bytes"
	"sync/atomic"

	"github.com/breach-exporter/breach_exporter/internal/config"
)

// tokenFilterMin is how many tokens it takes for the one-pass search: for
// fewer, one bytes.Contains each is as fast.
const tokenFilterMin = 3

// tokens finds the accounts' API tokens in a body. With many accounts,
// one search per token was a pass over the body each, on every request;
// the filter makes it one pass for all of them.
type tokens struct {
	cur atomic.Pointer[tokenFilter]
}

// tokenFilter is a set of tokens and the pairs of bytes they start with.
type tokenFilter struct {
	tokens []string
	starts [1 << 16 / 64]uint64 // a bit per first two bytes of a token
	short  []string             // tokens of one byte, searched for alone
}

// contain reports whether body holds the API token of any account of
// bundle.
func (t *tokens) contain(body []byte, bundle *config.Bundle) bool {
	n := 0
	for _, a := range bundle.Accounts {
		if a.Token != nil && a.Token.Get() != "" {
			n++
		}
	}
	if n < tokenFilterMin {
		for _, a := range bundle.Accounts {
			if a.Token == nil {
				continue
			}
			if token := a.Token.Get(); token != "" && bytes.Contains(body, []byte(token)) {
				return true
			}
		}
		return false
	}
	return t.filter(bundle).contained(body)
}

// filter returns the filter of bundle's tokens as they are now: a token
// is re-read from its file after a 401, without a reload.
func (t *tokens) filter(bundle *config.Bundle) *tokenFilter {
	f := t.cur.Load()
	if f != nil {
		k := 0
		for _, a := range bundle.Accounts {
			if a.Token == nil {
				continue
			}
			if token := a.Token.Get(); token != "" {
				if k == len(f.tokens) || f.tokens[k] != token {
					f = nil
					break
				}
				k++
			}
		}
		if f != nil && k == len(f.tokens) {
			return f
		}
	}
	f = &tokenFilter{}
	for _, a := range bundle.Accounts {
		if a.Token == nil {
			continue
		}
		if token := a.Token.Get(); token != "" {
			f.add(token)
		}
	}
	t.cur.Store(f)
	return f
}

func (f *tokenFilter) add(token string) {
	f.tokens = append(f.tokens, token)
	if len(token) < 2 {
		f.short = append(f.short, token)
		return
	}
	p := uint16(token[0])<<8 | uint16(token[1])
	f.starts[p/64] |= 1 << (p % 64)
}

// contained reports whether body holds one of the tokens.
func (f *tokenFilter) contained(body []byte) bool {
	for _, token := range f.short {
		if bytes.Contains(body, []byte(token)) {
			return true
		}
	}
	for i := 0; i+1 < len(body); i++ {
		p := uint16(body[i])<<8 | uint16(body[i+1])
		if f.starts[p/64]&(1<<(p%64)) == 0 {
			continue
		}
		for _, token := range f.tokens {
			if len(token) >= 2 && bytes.HasPrefix(body[i:], []byte(token)) {
				return true
			}
		}
	}
	return false
}
