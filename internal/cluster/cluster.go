// SPDX-License-Identifier: Apache-2.0

// Package cluster is what the replicas of one deployment share through
// Redis or Valkey (the config's optional store section): one request
// budget per API key, claims on the work, and one ordered stream of the
// events that change the state every replica serves. Without a store none
// of it runs, and one replica needs no setup.
//
// The package only moves bytes and keeps the store's clock: what an event
// means is the exporter's (internal/exporter).
package cluster

import (
	"context"
	"time"

	"github.com/go-kit/log"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Store.
type Options struct {
	URL       string // redis:// or rediss:// (TLS)
	Password  string // from store.password_file; when set, it replaces the URL's
	KeyPrefix string // every key starts with it and a colon
	// Replica names this process in claims and in the events it publishes.
	Replica    string
	Registerer prometheus.Registerer
	Logger     log.Logger
}

// Event is one entry of the shared stream, in the store's order.
type Event struct {
	ID     string // the stream's ID: ordered, unique
	Kind   string
	Origin string // Options.Replica of the publisher
	Data   []byte
}

// Store is the client of the shared store. Every method is safe for
// concurrent use and bounded in time: none blocks past its context or the
// client's timeouts.
type Store struct{}

// Open checks the options and builds the client. It does not need the
// store to be up: Run connects, and reconnects, with backoff.
func Open(o Options) (*Store, error) { panic("unimplemented") }

// Run keeps breach_exporter_store_up true while the store answers, until
// ctx ends.
func (s *Store) Run(ctx context.Context) { panic("unimplemented") }

// Up reports whether the store answered the last command.
func (s *Store) Up() bool { panic("unimplemented") }

// Close closes the client.
func (s *Store) Close() error { panic("unimplemented") }

// Reserve takes the next request slot of the key's budget, spacing apart
// from the slot before it on the store's clock, and returns how long to
// wait before sending (0: now). A slot is never handed out twice, and a
// pause (Pause) pushes every later slot past its end.
func (s *Store) Reserve(ctx context.Context, key string, spacing time.Duration) (time.Duration, error) {
	panic("unimplemented")
}

// Pause holds every replica's requests on key for d from now on the
// store's clock (a 429's reset); a shorter pause never shortens a longer one.
func (s *Store) Pause(ctx context.Context, key string, d time.Duration) error {
	panic("unimplemented")
}

// Claim takes item of scope for lease: true when no other replica holds
// it and, unless urgent, its ready time (Release) has passed.
func (s *Store) Claim(ctx context.Context, scope, item string, lease time.Duration, urgent bool) (bool, error) {
	panic("unimplemented")
}

// Release gives a claim of this replica's back and makes item ready again
// in readyIn on the store's clock.
func (s *Store) Release(ctx context.Context, scope, item string, readyIn time.Duration) error {
	panic("unimplemented")
}

// Publish appends an event to the stream and returns its ID.
func (s *Store) Publish(ctx context.Context, kind string, data []byte) (string, error) {
	panic("unimplemented")
}

// PublishOnce appends an event unless one with the same digest was
// published within ttl; added is false for such a duplicate. Atomic: of
// two replicas publishing one digest, one adds it.
func (s *Store) PublishOnce(ctx context.Context, digest string, ttl time.Duration, kind string, data []byte) (added bool, err error) {
	panic("unimplemented")
}

// Last returns the ID of the newest event, "0-0" when there is none.
func (s *Store) Last(ctx context.Context) (string, error) { panic("unimplemented") }

// Read calls apply with every event after after up to and including
// until, in order, and returns the last ID applied (after when none).
func (s *Store) Read(ctx context.Context, after, until string, apply func(Event)) (string, error) {
	panic("unimplemented")
}

// Follow calls apply with every event after after, in order and never
// concurrently, until ctx ends; it reconnects with backoff when the store
// is down and goes on from the last event applied.
func (s *Store) Follow(ctx context.Context, after string, apply func(Event)) {
	panic("unimplemented")
}

// Checkpoint returns the newest checkpoint saved and the ID of the last
// event it holds; ok is false when there is none.
func (s *Store) Checkpoint(ctx context.Context) (data []byte, id string, ok bool, err error) {
	panic("unimplemented")
}

// SaveCheckpoint stores data as the state after event id, unless the
// checkpoint stored already holds a later event; it reports whether it
// stored it.
func (s *Store) SaveCheckpoint(ctx context.Context, data []byte, id string) (bool, error) {
	panic("unimplemented")
}
