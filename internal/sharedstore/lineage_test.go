// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// A checkpoint is written over only by a later one of its lineage, in
// place of the one the caller names (found invalid), or by a new
// lineage's first that holds a later event (replicas that start new
// lineages at once settle on the one that holds the most).
func TestWriteCheckpointKeepsTheLatestOfItsLineage(t *testing.T) {
	r := testkit.StartRedis(t)
	// The same rule whole and in parts, each on a prefix of its own.
	for _, inParts := range []bool{false, true} {
		prefix := map[bool]string{false: "whole", true: "parts"}[inParts]
		t.Run(prefix, func(t *testing.T) { keepsTheLatestOfItsLineage(t, open(t, r, "a", prefix), inParts) })
	}
}

func keepsTheLatestOfItsLineage(t *testing.T, s replica, inParts bool) {
	ctx := context.Background()
	if _, ok, err := s.LoadCheckpoint(ctx, 1<<20); ok || err != nil {
		t.Fatalf("a checkpoint where there is none: %v, %v", ok, err)
	}
	write := func(id, lineage, replace, from string, isNew, want bool) {
		t.Helper()
		c := Checkpoint{ID: id, Lineage: lineage, Data: []byte("state " + id), Extra: []byte("x")}
		if inParts {
			c = onePart(id, lineage, "state "+id, "x")
		}
		c.New, c.From = isNew, from
		saved, err := s.WriteCheckpoint(ctx, c, replace)
		if err != nil || saved != want {
			t.Fatalf("WriteCheckpoint(%s, %s, replace %q, from %q, new %v): %v, %v; want %v", id, lineage, replace, from, isNew, saved, err, want)
		}
	}
	for _, c := range []struct {
		id, lineage, replace string
		isNew, saved         bool
	}{
		{"5-0", "L", "", false, true},
		{"10-0", "L", "", false, true}, // later, though "10-0" < "5-0" as strings
		{"9-9", "L", "", false, false},
		{"10-0", "L", "", false, true},      // the same event: newer data about it
		{"11-0", "M", "", false, false},     // another lineage
		{"12-0", "M", "10-1", false, false}, // in place of another checkpoint
		{"3-0", "M", "10-0", false, true},   // in place of this one
		{"4-0", "M", "", false, true},
		{"3-5", "N", "", true, false}, // a new lineage's first, holding less
		{"4-0", "N", "", true, false}, // ... or as much: the first written stays
		{"4-1", "N", "", true, true},  // ... holding more
		{"5-0", "O", "", false, false},
		{"9-0", "M", "", false, false}, // M's later ones, not new, stay out
		{"4-2", "N", "", false, true},
	} {
		write(c.id, c.lineage, c.replace, "", c.isNew, c.saved)
	}
	// A new lineage's first replaces the one its writer descended from,
	// though it holds less (after a store restarted from an older save,
	// a replica that did not see the loss goes on writing that lineage's
	// checkpoints at its own position).
	write("4-0", "P", "", "M", true, false)
	write("4-0", "P", "", "N", true, true)
	c, ok, err := s.LoadCheckpoint(ctx, 1<<20)
	data := string(c.Data)
	if inParts && err == nil {
		data = readOnePart(t, s.Client, c)
	}
	if err != nil || !ok || c.ID != "4-0" || c.Lineage != "P" || data != "state 4-0" || string(c.Extra) != "x" {
		t.Fatalf("LoadCheckpoint: %+v, %v, %v", c, ok, err)
	}
	if _, ok, err := s.LoadCheckpoint(ctx, 5); !ok || !errors.Is(err, ErrCheckpointTooLarge) {
		t.Fatalf("a checkpoint over its bound: %v, %v; want ErrCheckpointTooLarge", ok, err)
	}
	if _, err := s.WriteCheckpoint(ctx, Checkpoint{ID: "x"}, ""); err == nil {
		t.Fatal("a checkpoint saved at no stream ID")
	}
}

// The head tells the checkpoint and the stream's bounds without any
// entry's data.
func TestHeadShowsTheStreamsBounds(t *testing.T) {
	r := testkit.StartRedis(t)
	s := open(t, r, "a", "")
	ctx := context.Background()
	h, err := s.Head(ctx)
	if err != nil || h.HasCheckpoint || h.Stream || h.SyncedAlive || time.Since(h.Now).Abs() > time.Minute {
		t.Fatalf("the head of an empty store: %+v, %v", h, err)
	}
	var ids []string
	for i := range 3 {
		id, err := s.Publish(ctx, "answered", []byte(strings.Repeat("x", i)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if _, err := s.WriteCheckpoint(ctx, onePart(ids[1], "L", "12345", ""), ""); err != nil {
		t.Fatal(err)
	}
	if err := s.MarkSynced(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	h, err = s.Head(ctx)
	if err != nil || !h.HasCheckpoint || h.ID != ids[1] || h.Lineage != "L" || h.Size != 5 || !h.Stream ||
		h.First != ids[0] || h.Last != ids[2] || h.LastGiven != ids[2] || h.Added != 3 || h.Length != 3 || !h.SyncedAlive {
		t.Fatalf("head %+v, %v; want the checkpoint at %s and the stream %v", h, err, ids[1], ids)
	}
	if Ahead(ids[2], h.Now, time.Minute) || !Ahead("18446744073709551615-0", h.Now, time.Minute) || !Ahead("x", h.Now, 0) {
		t.Error("Ahead does not tell an ID of the store's clock from one past it")
	}
	if !Adjacent("5-1", "5-2") || Adjacent("5-1", "6-0") || !Before("9-0", "10-0") {
		t.Error("Adjacent or Before misorders IDs")
	}
}

// onePart is a checkpoint whose state is one part, data.
func onePart(id, lineage, data, extra string) Checkpoint {
	return Checkpoint{ID: id, Lineage: lineage, Extra: []byte(extra), Parts: []Part{{Name: "s", Digest: data}},
		Body: func(string) ([]byte, error) { return []byte(data), nil }}
}

// readOnePart reads back onePart's data.
func readOnePart(t *testing.T, s *Client, c Checkpoint) string {
	t.Helper()
	if len(c.Parts) != 1 || c.Parts[0].Name != "s" {
		t.Fatalf("parts %+v; want one, s", c.Parts)
	}
	b, err := s.ReadParts(context.Background(), c.Gen, []string{"s"}, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	return string(b[0])
}
