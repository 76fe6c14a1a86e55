// SPDX-License-Identifier: Apache-2.0

package sharedstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// partsOf is a checkpoint of the given parts (name to content, the content
// its own digest), counting the bodies WriteCheckpoint asks for.
func partsOf(id string, parts map[string]string, sent *[]string) Checkpoint {
	c := Checkpoint{ID: id, Lineage: "L", Extra: []byte("x"), Body: func(name string) ([]byte, error) {
		*sent = append(*sent, name)
		return []byte(parts[name]), nil
	}}
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range parts {
			if !yield(n) {
				return
			}
		}
	}) {
		c.Parts = append(c.Parts, Part{Name: name, Digest: parts[name]})
	}
	return c
}

// A checkpoint in parts: a write sends only the parts the store lacks and
// removes those gone, a refused write sends none, and a read gets them in
// pieces of bounded size, or hears that another write came between.
func TestCheckpointPartsSendOnlyWhatChanged(t *testing.T) {
	r := testkit.StartRedis(t)
	s := open(t, r, "a", "")
	ctx := context.Background()
	parts := map[string]string{}
	for i := range 100 {
		parts[fmt.Sprintf("p%d", i)] = fmt.Sprintf("content %d", i)
	}
	var sent []string
	if saved, err := s.WriteCheckpoint(ctx, partsOf("5-0", parts, &sent), ""); err != nil || !saved || len(sent) != 100 {
		t.Fatalf("first write: %v, %v, %d parts sent; want all 100", saved, err, len(sent))
	}
	parts["p7"] = "changed"
	delete(parts, "p8")
	sent = nil
	if saved, err := s.WriteCheckpoint(ctx, partsOf("6-0", parts, &sent), ""); err != nil || !saved || !slices.Equal(sent, []string{"p7"}) {
		t.Fatalf("second write: %v, %v, sent %v; want p7 alone", saved, err, sent)
	}
	sent = nil
	if saved, err := s.WriteCheckpoint(ctx, partsOf("5-9", parts, &sent), ""); err != nil || saved || len(sent) != 0 {
		t.Fatalf("an older write: %v, %v, sent %v; want refused with nothing sent", saved, err, sent)
	}

	c, ok, err := s.LoadCheckpoint(ctx, 1<<20)
	if err != nil || !ok || c.ID != "6-0" || len(c.Parts) != 99 || len(c.Data) != 0 {
		t.Fatalf("LoadCheckpoint: %v, %v, %s with %d parts and %d bytes of data", ok, err, c.ID, len(c.Parts), len(c.Data))
	}
	h, err := s.Head(ctx)
	if want := int64(len("x")); err != nil || h.Size <= want {
		t.Fatalf("head size %d, %v; want the parts' bytes", h.Size, err)
	}
	got := map[string]string{}
	for piece := range slices.Chunk(c.Parts, 30) {
		var names []string
		for _, p := range piece {
			names = append(names, p.Name)
		}
		bodies, err := s.ReadParts(ctx, c.Gen, names, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range names {
			got[n] = string(bodies[i])
		}
	}
	for n, want := range parts {
		if got[n] != want {
			t.Errorf("part %s read back as %q, want %q", n, got[n], want)
		}
	}
	if len(got) != len(parts) {
		t.Errorf("%d parts read back, want %d", len(got), len(parts))
	}
	if _, err := s.ReadParts(ctx, c.Gen, []string{"p1", "p2"}, 5); !errors.Is(err, ErrCheckpointTooLarge) {
		t.Errorf("parts over the bound: %v, want ErrCheckpointTooLarge", err)
	}
	if _, err := s.WriteCheckpoint(ctx, partsOf("7-0", parts, &sent), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadParts(ctx, c.Gen, []string{"p1"}, 1<<20); !errors.Is(err, ErrCheckpointMoved) {
		t.Errorf("a read across another write: %v, want ErrCheckpointMoved", err)
	}
}

// inParts is a store whose checkpoint is in parts, one part p, at 5-0.
func inParts(t *testing.T) (*testkit.Redis, replica) {
	t.Helper()
	r := testkit.StartRedis(t)
	s := open(t, r, "a", "")
	var sent []string
	if _, err := s.WriteCheckpoint(context.Background(), partsOf("5-0", map[string]string{"p": "new"}, &sent), ""); err != nil {
		t.Fatal(err)
	}
	return r, s
}

// The previous release writes id and data over the checkpoint: its data
// is read then, not the parts of an older ID; and it reads the note in
// data, not a state.
func TestCheckpointOfThePreviousReleaseIsReadWhole(t *testing.T) {
	r, s := inParts(t)
	ctx := context.Background()
	var sent []string
	c := raw(t, r)
	if note, err := c.HGet(ctx, "breach_exporter:checkpoint", "data").Result(); err != nil || note != partsNote {
		t.Fatalf("data while in parts: %q, %v", note, err)
	}
	// What 28b5cca's SaveCheckpoint does.
	if err := c.HSet(ctx, "breach_exporter:checkpoint", "id", "6-0", "data", "old state").Err(); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.LoadCheckpoint(ctx, 1<<20)
	if err != nil || !ok || got.ID != "6-0" || string(got.Data) != "old state" || got.Parts != nil {
		t.Fatalf("LoadCheckpoint: %+v, %v, %v; want the previous release's data", got, ok, err)
	}
	if h, err := s.Head(ctx); err != nil || h.Size != int64(len("old state")+len("x")) {
		t.Fatalf("head size %d, %v; want the data's and the extra's", h.Size, err)
	}
	// A later write of this release builds on the parts the store holds.
	sent = nil
	if saved, err := s.WriteCheckpoint(ctx, partsOf("7-0", map[string]string{"p": "new", "q": "more"}, &sent), ""); err != nil || !saved || !slices.Equal(sent, []string{"q"}) {
		t.Fatalf("write after the previous release's: %v, %v, sent %v", saved, err, sent)
	}
	got, _, err = s.LoadCheckpoint(ctx, 1<<20)
	if err != nil || got.ID != "7-0" || len(got.Parts) != 2 {
		t.Fatalf("LoadCheckpoint: %+v, %v", got, err)
	}
}

// A write of the whole state over a checkpoint in parts of the same ID is
// read whole (the previous release reads its data): it removes parts_id,
// and keeps the parts, on which the next write in parts builds; that write
// puts the note back in data, so no whole state is left beside a later ID.
func TestWholeWriteOverPartsIsReadWhole(t *testing.T) {
	r, s := inParts(t)
	ctx := context.Background()
	var sent []string
	if h, err := s.Head(ctx); err != nil || !h.Parts {
		t.Fatalf("head %+v, %v; want in parts", h, err)
	}
	if saved, err := s.WriteCheckpoint(ctx, Checkpoint{ID: "5-0", Lineage: "L", Data: []byte("whole"), Extra: []byte("x")}, ""); err != nil || !saved {
		t.Fatalf("the whole write: %v, %v", saved, err)
	}
	got, ok, err := s.LoadCheckpoint(ctx, 1<<20)
	if err != nil || !ok || string(got.Data) != "whole" || got.Parts != nil {
		t.Fatalf("LoadCheckpoint: %+v, %v, %v; want the whole data", got, ok, err)
	}
	if h, err := s.Head(ctx); err != nil || h.Parts || h.Size != int64(len("whole")+len("x")) {
		t.Fatalf("head %+v, %v; want whole, of the data's and the extra's size", h, err)
	}
	sent = nil
	if saved, err := s.WriteCheckpoint(ctx, partsOf("6-0", map[string]string{"p": "new", "q": "more"}, &sent), ""); err != nil || !saved || !slices.Equal(sent, []string{"q"}) {
		t.Fatalf("the write in parts after the whole one: %v, %v, sent %v", saved, err, sent)
	}
	if note, err := raw(t, r).HGet(ctx, "breach_exporter:checkpoint", "data").Result(); err != nil || note != partsNote {
		t.Fatalf("data after the write in parts: %q, %v; want the note", note, err)
	}
}
