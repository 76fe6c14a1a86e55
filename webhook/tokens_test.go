// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/config"
)

// tokenBundle has an account per token; "" is an account without one.
func tokenBundle(tokens ...string) *config.Bundle {
	b := &config.Bundle{}
	for i, token := range tokens {
		a := &config.AccountBundle{Name: fmt.Sprint("a", i)}
		if token != "" {
			a.Token = config.NewTokenSource(token, func() (string, error) { return "", errors.New("no file") })
		}
		b.Accounts = append(b.Accounts, a)
	}
	return b
}

// containsAny is what the filter must answer: a search per token.
func containsAny(body []byte, b *config.Bundle) bool {
	for _, a := range b.Accounts {
		if a.Token != nil && a.Token.Get() != "" && bytes.Contains(body, []byte(a.Token.Get())) {
			return true
		}
	}
	return false
}

func TestTokensFound(t *testing.T) {
	many := tokenBundle("tok-alpha-0001", "", "tok-beta-0002", "x", "tok-gamma-0003", "zz")
	few := tokenBundle("tok-alpha-0001", "tok-beta-0002")
	var tk tokens
	for _, c := range []struct {
		body string
		want bool
	}{
		{`{"summary":"nothing here"}`, false},
		{`{"summary":"tok-beta-0002"}`, true},
		{`tok-gamma-0003`, true},
		{`{"summary":"tok-gamma-000"}`, false},
		{`{"summary":"x"}`, true}, // a one-byte token
		{`{"summary":"az"}`, false},
		{`{"summary":"azz"}`, true},
		{``, false},
	} {
		for _, b := range []*config.Bundle{many, few} {
			if got, want := tk.contain([]byte(c.body), b), containsAny([]byte(c.body), b); got != want {
				t.Errorf("%q with %d accounts: %v, want %v", c.body, len(b.Accounts), got, want)
			}
		}
		if got := tk.contain([]byte(c.body), many); got != c.want {
			t.Errorf("%q: %v, want %v", c.body, got, c.want)
		}
	}
	// A token re-read after a 401 is searched for from the next request
	// on, without a reload.
	rotated := tokenBundle("tok-alpha-0001", "tok-beta-0002", "tok-gamma-0003")
	if tk.contain([]byte("tok-delta-0004"), rotated) {
		t.Fatal("found a token not in use")
	}
	rotated.Accounts[2].Token = config.NewTokenSource("tok-delta-0004", nil)
	if !tk.contain([]byte("tok-delta-0004"), rotated) {
		t.Fatal("the new token was not searched for")
	}
}

// FuzzTokens: the one-pass filter finds a token exactly when a search per
// token does.
func FuzzTokens(f *testing.F) {
	f.Add([]byte(`{"summary":"tok-beta-0002"}`), "tok", "beta-0002", "a")
	f.Add([]byte(`aaab`), "ab", "aab", "b")
	f.Fuzz(func(t *testing.T, body []byte, t1, t2, t3 string) {
		b := tokenBundle(t1, t2, t3, "fixed-token-for-three")
		var tk tokens
		if got, want := tk.contain(body, b), containsAny(body, b); got != want {
			t.Fatalf("%q in %q: %v, want %v", []string{t1, t2, t3}, body, got, want)
		}
	})
}
