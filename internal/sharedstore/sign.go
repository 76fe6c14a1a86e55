// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strings"
	"sync"

	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/ratelog"
)

// What this release writes to the store is signed: every stream entry, the
// checkpoint and the serving lease carry sig, one tag per key of the
// writer's signing set, over every other field of theirs and the key they
// are stored under (signed). Anyone who can write to the store can add an
// entry that reads well; only a holder of one of the deployment's keys can
// add one that verifies. A reader accepts what one tag of it verifies with
// one key of its own set: two configurations that share a key (an API key
// rotated with a signing_key_file, or the file rotated with two lines)
// read each other.
//
// What a release before this one wrote has no sig: it is read as ever
// until the deployment is signed only (latch.go), then skipped.

// Keys is the deployment's key set (config.Bundle.StoreKeys): Sign signs
// what this replica writes, one tag per key; Verify checks what it reads.
// Never logged.
type Keys struct {
	Sign, Verify [][]byte
}

const (
	// tagBytes is one tag's length: a truncated HMAC-SHA256, as
	// RFC 2104 allows, 128 bits.
	tagBytes = 16
	// maxTags bounds the tags of one sig: a writer signs with one key of
	// a signing_key_file and the derived one.
	maxTags = 3
	// sigField names the field, hash field or key suffix of the tags.
	sigField = "sig"
	// signLabel starts every signed message: a key of this set signs
	// nothing else, and a later encoding names another.
	signLabel = "breach_exporter store sig v1"
)

// The values of breach_exporter_store_unverified_total's label what.
const (
	unverifiedEvent      = "event"
	unverifiedCheckpoint = "checkpoint"
	unverifiedServing    = "serving"
)

// unverifiedNames name the values of what in a log line.
var unverifiedNames = map[string]string{
	unverifiedEvent:      "stream entry",
	unverifiedCheckpoint: "checkpoint",
	unverifiedServing:    "serving lease",
}

// signingMetrics are breach_exporter_store_unverified_total, each value
// at 0, and breach_exporter_store_signed_only (latch.go).
func signingMetrics() (*prometheus.CounterVec, prometheus.Gauge) {
	unverified := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "breach_exporter_store_unverified_total",
		Help: "What this replica skipped from the shared store for its signature, by what (event, checkpoint, serving): a signature that verifies with none of this deployment's keys (forged, or signed with keys this replica lacks), or none once the deployment is signed only.",
	}, []string{"what"})
	for _, what := range []string{unverifiedEvent, unverifiedCheckpoint, unverifiedServing} {
		unverified.WithLabelValues(what)
	}
	return unverified, prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "breach_exporter_store_signed_only",
		Help: "1 when this replica skips unsigned entries of the shared store: every replica announced a release that signs for a minute, or its state or the checkpoint said so; 0 before, and with store.accept_unsigned.",
	})
}

// signed is the canonical form of fields (name, value pairs) stored under
// key: each part length-prefixed, so that no two lists of fields read
// alike, and the key first, so that nothing signed for one key (a stream,
// the checkpoint, the lease) verifies under another or another prefix.
func signed(mac hash.Hash, key string, fields ...string) []byte {
	mac.Reset()
	var n [8]byte
	write := func(s string) {
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		mac.Write(n[:])
		mac.Write([]byte(s))
	}
	write(signLabel)
	write(key)
	for _, f := range fields {
		write(f)
	}
	return mac.Sum(nil)[:tagBytes]
}

// sign returns the sig of fields under key: the tags of each signing key,
// hex, comma-separated; "" without signing keys.
func (s *Client) sign(key string, fields ...string) string {
	tags := make([]string, 0, len(s.keys.Sign))
	for _, k := range s.keys.Sign[:min(len(s.keys.Sign), maxTags)] {
		tags = append(tags, hex.EncodeToString(s.signedWith(k, key, fields...)))
	}
	return strings.Join(tags, ",")
}

// signedWith is signed with the HMAC of secret, taken from the client's
// pool of them: a publish signs every entry, and a new HMAC costs a third
// of the tag of an alert's entry (its key's pads hashed, its state
// allocated).
func (s *Client) signedWith(secret []byte, key string, fields ...string) []byte {
	p, ok := s.macs.Load(string(secret))
	if !ok {
		p, _ = s.macs.LoadOrStore(string(secret), &sync.Pool{New: func() any { return hmac.New(sha256.New, secret) }})
	}
	pool := p.(*sync.Pool)
	mac := pool.Get().(hash.Hash)
	defer pool.Put(mac)
	return signed(mac, key, fields...)
}

// verdict is what a sig says of what it signs.
type verdict int

const (
	verified   verdict = iota // a tag verifies with a key of this replica's
	unsigned                  // no sig: the previous release's
	unverified                // a sig none of whose tags verifies, or malformed
)

// verify checks sig against fields under key.
func (s *Client) verify(sig, key string, fields ...string) verdict {
	if sig == "" {
		return unsigned
	}
	if len(sig) > maxTags*(2*tagBytes+1) {
		return unverified // not decoded: what the store holds is bounded first
	}
	tags := strings.Split(sig, ",")
	if len(tags) > maxTags {
		return unverified
	}
	for _, k := range s.keys.Verify {
		want := s.signedWith(k, key, fields...)
		for _, t := range tags {
			got, err := hex.DecodeString(t)
			if err == nil && hmac.Equal(got, want) {
				return verified
			}
		}
	}
	return unverified
}

// accepted reports whether what has verdict v is read: verified, or
// unsigned while the deployment is not signed only (or the config accepts
// unsigned entries for a rollback). What is refused is counted and logged,
// at most once per logEvery per kind.
func (s *Client) accepted(v verdict, what, at string) bool {
	if s.admits(v) {
		return true
	}
	s.unverified.WithLabelValues(what).Inc()
	if suppressed, ok := s.logs.Allow("unverified-" + what); ok {
		msg := "Skipped a " + unverifiedNames[what] + " in the store whose signature does not verify with this deployment's keys: forged, or signed with keys this replica does not have (store.signing_key_file, the API keys)"
		if v == unsigned {
			msg = "Skipped an unsigned " + unverifiedNames[what] + " in the store: the deployment is signed only (every replica ran a release that signs); a replica of an older release needs store.accept_unsigned on the others (docs/replicas.md)"
		}
		level.Warn(s.logger).Log("msg", msg, "at", shown(at), ratelog.SuppressedKey, suppressed)
	}
	return false
}

// admits reports whether what has verdict v is read, without a count.
func (s *Client) admits(v verdict) bool {
	return v == verified || (v == unsigned && !s.signedOnly())
}

// entryVerdict checks a stream entry's sig.
func (s *Client) entryVerdict(m redis.XMessage) verdict {
	str := func(k string) string { v, _ := m.Values[k].(string); return v }
	return s.verify(str(sigField), s.key("events"), entryFields(str("kind"), str("origin"), str(entryDeployment), str("data"))...)
}

// entryFields are the signed fields of a stream entry, as luaStream's
// xadd writes them (prev aside: see docs/replicas.md).
func entryFields(kind, origin, deployment, data string) []string {
	return []string{"kind", kind, "origin", origin, entryDeployment, deployment, "data", data}
}
