// SPDX-License-Identifier: Apache-2.0

package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/breach-exporter/breach_exporter/internal/config"
)

// SignatureHeader carries `sha256=<lowercase hex HMAC-SHA256 of the raw body>`.
const SignatureHeader = "X-Service-Signature"

const signaturePrefix = "sha256="

// signedBy returns the account whose secret signs body, nil when none does
// or the request does not carry exactly one signature header in the spec's
// exact shape. Uppercase hex is refused: the spec prescribes lowercase, and
// accepting only one spelling keeps the check free of interpretation. Each
// comparison is constant-time; the first match ends the search, which tells
// a sender only which account's secret it holds (the load refuses one
// secret in two accounts).
func (m *macs) signedBy(header http.Header, body []byte, bundle *config.Bundle) *config.AccountBundle {
	values := header.Values(SignatureHeader)
	if len(values) != 1 {
		return nil
	}
	var digest [sha256.Size]byte
	if !parseSignature(values[0], &digest) {
		return nil
	}
	pools := m.pools(bundle)
	for i, a := range bundle.Accounts {
		for j := range a.Secrets {
			st := pools[i][j].Get().(*macState)
			st.mac.Reset()
			st.mac.Write(body)
			match := hmac.Equal(st.mac.Sum(st.sum[:0]), digest[:])
			pools[i][j].Put(st)
			if match {
				return a
			}
		}
	}
	return nil
}

// macs keeps HMAC states keyed with the secrets of the bundle in force,
// to be reset and reused: hmac.New derives the key's pads and allocates
// five times on every call, on the path every request takes.
type macs struct {
	cur atomic.Pointer[macPools]
}

// macState is one HMAC state and room for its sum.
type macState struct {
	mac hash.Hash
	sum [sha256.Size]byte
}

// macPools are the states of one bundle, by account and secret.
type macPools struct {
	bundle *config.Bundle
	pools  [][]*sync.Pool
}

// pools returns the states of b, made anew after a reload.
func (m *macs) pools(b *config.Bundle) [][]*sync.Pool {
	if c := m.cur.Load(); c != nil && c.bundle == b {
		return c.pools
	}
	c := &macPools{bundle: b, pools: make([][]*sync.Pool, len(b.Accounts))}
	for i, a := range b.Accounts {
		c.pools[i] = make([]*sync.Pool, len(a.Secrets))
		for j, secret := range a.Secrets {
			c.pools[i][j] = &sync.Pool{New: func() any { return &macState{mac: hmac.New(sha256.New, secret)} }}
		}
	}
	m.cur.Store(c)
	return c.pools
}

func parseSignature(value string, digest *[sha256.Size]byte) bool {
	hexDigest, ok := strings.CutPrefix(value, signaturePrefix)
	if !ok || len(hexDigest) != 2*sha256.Size {
		return false
	}
	for i := range digest {
		hi, ok1 := lowerHex(hexDigest[2*i])
		lo, ok2 := lowerHex(hexDigest[2*i+1])
		if !ok1 || !ok2 {
			return false
		}
		digest[i] = hi<<4 | lo
	}
	return true
}

// lowerHex is the value of a lowercase hex digit.
func lowerHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
