// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/breach-exporter/breach_exporter/internal/breach"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// The checkpoint in parts (format 2). The whole state, encoded every
// snapshot interval and sent by every replica, cost a replica about 1.4 KB
// of writes per address and minute (143 MB at 100,000 addresses), and a
// start read it back in one reply. Now the addresses are split by their
// key's hash into checkpointBuckets parts, plus one part (metaPart) for
// the accounts and the duplicate memory; each part is the state
// snapshot's format (persist), compressed with zstd. A write sends only the
// parts whose content changed since the checkpoint the store holds (in a
// quiet minute, those of the about 60 addresses the budget read), and
// none when the lineage rule refuses it; a start reads the parts in pieces
// of partsPerRead. Each part read is bounded before and after it is
// decompressed (maxPartBytes, and the whole at maxCheckpointBytes), its
// digest checked, and its addresses checked to belong to it.
//
// The previous release (28b5cca) reads the checkpoint's data as a state
// snapshot, strictly: it refuses the note the data holds beside parts and
// starts from its own state folder and the events after it
// (docs/replicas.md, "Versioned formats"). So the checkpoint is written in
// parts only while every alive replica announces that it reads them
// (sharedstore's Formats), and whole otherwise: during a rolling upgrade
// from the previous release, and at once when one of it appears beside
// this one (a rollback). This release reads either form.
//
// Restored addresses come in the parts' order rather than the schedule's:
// only addresses never read yet are planned by that order.

const (
	// checkpointBuckets is how many parts hold the addresses: at 100,000
	// addresses about 24 each, some 3 KB compressed.
	checkpointBuckets = 4096
	metaPart          = "meta"
	bucketPrefix      = "a"
	newsPrefix        = "n" // the news of a bucket's addresses
	// maxPartBytes bounds one part decompressed: a part of a deployment
	// at the state snapshot's bound (1 GiB) has a few hundred KB.
	maxPartBytes = 64 << 20
	// partsPerRead is how many parts one read of a start fetches.
	partsPerRead = 256
	// checkpointLoadTries bounds the loads of a start that another
	// replica's write interrupts (one write a snapshot interval).
	checkpointLoadTries = 3
)

// A part's content as written never depends on the time: the same state
// gives the same bytes, and so the same digest.
var partTime = time.Time{}

// partEncoder compresses the parts: one for the process, since building
// one costs more than a part (EncodeAll is safe for concurrent use and
// starts no goroutine). It keeps its buffers for the process's life: with
// zstd's default window (8 MiB) that is 18 MB of heap from the first
// write on, most of a replica's. A part has a few hundred KB at most, so
// a window of partWindow loses nothing, and keeps 2.5 MB.
var partEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
	return zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(partWindow), zstd.WithLowerEncoderMem(true))
})

// partWindow is the parts' compression window, above a part's size.
const partWindow = 1 << 20

func bucketOf(email string) int {
	h := fnv.New64a()
	h.Write([]byte(breach.Key(email)))
	return int(h.Sum64() % checkpointBuckets)
}

func bucketName(prefix string, i int) string { return prefix + strconv.Itoa(i) }

// stateParts is a checkpoint's state split in parts.
type stateParts struct {
	meta    persist.State
	buckets [checkpointBuckets][]watchlist.SavedEntry
	news    [checkpointBuckets][]addressExtra
}

// newsPart is the content of a bucket's news part, in persist's framing.
type newsPart struct {
	V    int            `json:"v"`
	News []addressExtra `json:"news"`
}

// splitState splits st's shared state (its per-replica parts, the
// receiver's counts and the journal's point, are not a checkpoint's), and
// the news by key (newsOf's order).
func splitState(st persist.State, news []addressExtra) *stateParts {
	p := &stateParts{meta: persist.State{Watchlist: watchlist.Saved{Accounts: st.Watchlist.Accounts}, Seen: st.Seen, SignedOnly: st.SignedOnly}}
	for _, e := range st.Watchlist.Entries {
		b := bucketOf(e.Address.Email)
		p.buckets[b] = append(p.buckets[b], e)
	}
	for _, n := range news {
		b := bucketOf(n.Key)
		p.news[b] = append(p.news[b], n)
	}
	return p
}

// newsOf is each address's news, by key: copied, so that the watchlist
// may change them once its lock is released.
func newsOf(news map[string]watchlist.News) []addressExtra {
	out := make([]addressExtra, 0, len(news))
	for k, n := range news {
		out = append(out, addressExtra{Key: k, NewDatabases: n.NewDatabases, SensitiveFields: n.SensitiveFields})
	}
	slices.SortFunc(out, func(a, b addressExtra) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// raw is the named part's content, uncompressed.
func (p *stateParts) raw(name string) ([]byte, error) {
	if name == metaPart {
		return persist.Encode(p.meta, partTime)
	}
	if i, ok := bucketIndex(name, newsPrefix); ok {
		return persist.Framed(newsPart{V: eventFormat, News: p.news[i]})
	}
	i, ok := bucketIndex(name, bucketPrefix)
	if !ok {
		return nil, fmt.Errorf("no part %q", name)
	}
	return persist.Encode(persist.State{Watchlist: watchlist.Saved{Entries: p.buckets[i]}}, partTime)
}

// bucketIndex is the bucket of a part's name of prefix.
func bucketIndex(name, prefix string) (int, bool) {
	s, ok := strings.CutPrefix(name, prefix)
	if !ok || s == "" || s[0] == '0' && s != "0" || s[0] == '+' {
		return 0, false
	}
	i, err := strconv.Atoi(s)
	return i, err == nil && i >= 0 && i < checkpointBuckets
}

// partDigest is the digest of a part's content: its checksum line (the
// SHA-256 of the rest, persist's framing), which decoding the part checks.
func partDigest(raw []byte) string { return persist.Checksum(raw) }

// list is the parts with their digests: the meta part and every bucket
// that holds an address, or news.
func (p *stateParts) list() ([]sharedstore.Part, error) {
	names := []string{metaPart}
	for i := range checkpointBuckets {
		if len(p.buckets[i]) > 0 {
			names = append(names, bucketName(bucketPrefix, i))
		}
		if len(p.news[i]) > 0 {
			names = append(names, bucketName(newsPrefix, i))
		}
	}
	parts := make([]sharedstore.Part, len(names))
	for i, name := range names {
		raw, err := p.raw(name)
		if err != nil {
			return nil, err
		}
		parts[i] = sharedstore.Part{Name: name, Digest: partDigest(raw)}
	}
	return parts, nil
}

// checkpointOf is the checkpoint of st at id with extra (take's; nil: of
// none): in parts once every alive replica of the deployment announces
// that it reads them (readsParts), else whole, in the form the previous
// release reads (data: st encoded, when the caller has it), so that
// replicas of both releases run side by side during an upgrade and a
// rollback. The extra is in both forms; in parts, the news go in parts of
// their own: a write sends those of the addresses whose news changed.
func (r *replicas) checkpointOf(ctx context.Context, st persist.State, data []byte, extra *checkpointExtra, id string) (sharedstore.Checkpoint, error) {
	x := checkpointExtra{V: eventFormat, ID: id}
	if extra != nil {
		x = *extra
	}
	if !readsParts(r.shared.Formats(ctx)) {
		var err error
		if data == nil {
			if data, err = persist.Encode(st, time.Now()); err != nil {
				return sharedstore.Checkpoint{}, err
			}
		}
		xb, err := json.Marshal(x)
		return sharedstore.Checkpoint{ID: id, Data: data, Extra: xb}, err
	}
	news := x.News
	x.News = nil
	c, err := partsOf(st, news, id)
	if err != nil {
		return c, err
	}
	c.Extra, err = json.Marshal(x)
	return c, err
}

// readsParts reports, from sharedstore's Formats, whether every alive
// replica reads the checkpoint in parts; not when that is unknown.
func readsParts(lowest int, complete bool, err error) bool {
	return err == nil && complete && lowest >= sharedstore.FormatParts
}

// partsUnread is a synced replica's round step while the store holds the
// checkpoint in parts only: once a replica that reads it only whole is
// alive (a rollback to the previous release, or one of it started beside
// this one), the checkpoint is written whole at once, as for a store
// without a valid checkpoint. An error of the look waits for the next.
func (r *replicas) partsUnread(ctx context.Context, head sharedstore.Head) {
	if !head.Parts || r.sync.urgent {
		return
	}
	lowest, complete, err := r.shared.Formats(ctx)
	if err == nil && !readsParts(lowest, complete, nil) {
		r.sync.behind.Store(true)
		r.sync.urgent = true
	}
}

// partsOf is the checkpoint of st and news at id in parts: its parts and,
// for those the store lacks, their compressed bytes.
func partsOf(st persist.State, news []addressExtra, id string) (sharedstore.Checkpoint, error) {
	p := splitState(st, news)
	parts, err := p.list()
	if err != nil {
		return sharedstore.Checkpoint{}, err
	}
	digests := make(map[string]string, len(parts))
	for _, part := range parts {
		digests[part.Name] = part.Digest
	}
	// The parts are encoded again for their bytes rather than kept (the
	// whole state, uncompressed): the same state gives the same content,
	// which the digest checks.
	body := func(name string) ([]byte, error) {
		raw, err := p.raw(name)
		if err != nil {
			return nil, err
		}
		if partDigest(raw) != digests[name] {
			return nil, fmt.Errorf("part %s changed while it was written", name)
		}
		enc, err := partEncoder()
		if err != nil {
			return nil, err
		}
		return enc.EncodeAll(raw, nil), nil
	}
	return sharedstore.Checkpoint{ID: id, Parts: parts, Body: body}, nil
}

// invalidParts is a checkpoint whose parts fail their checks: counted
// and logged as a checkpoint that cannot be valid.
type invalidParts struct{ err error }

func (e invalidParts) Error() string { return e.err.Error() }
func (e invalidParts) Unwrap() error { return e.err }

// loadParts reads c's parts in pieces and returns the state and the news
// they hold.
// The parts of a piece are decompressed and decoded on every core: a start
// waits for them.
func (r *replicas) loadParts(ctx context.Context, c sharedstore.Checkpoint) (persist.State, []addressExtra, error) {
	if !slices.ContainsFunc(c.Parts, func(p sharedstore.Part) bool { return p.Name == metaPart }) {
		return persist.State{}, nil, invalidParts{errors.New("no part " + metaPart + ": not a checkpoint this release writes")}
	}
	workers := runtime.GOMAXPROCS(0)
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(workers), zstd.WithDecoderMaxMemory(maxPartBytes))
	if err != nil {
		return persist.State{}, nil, err
	}
	defer dec.Close()
	pd := &partsDecoder{dec: dec, workers: workers}
	var st loadedParts
	var fetched int64
	for piece := range slices.Chunk(c.Parts, partsPerRead) {
		names := make([]string, len(piece))
		for i, p := range piece {
			names[i] = p.Name
		}
		bodies, err := r.shared.ReadParts(ctx, c.Gen, names, maxCheckpointBytes-fetched)
		switch {
		case errors.Is(err, sharedstore.ErrCheckpointTooLarge):
			return persist.State{}, nil, invalidParts{err}
		case err != nil:
			return persist.State{}, nil, err
		}
		for _, b := range bodies {
			fetched += int64(len(b))
		}
		if err := pd.piece(&st, piece, bodies); err != nil {
			return persist.State{}, nil, invalidParts{err}
		}
	}
	return st.state, st.news, nil
}

// loadedParts is what the parts read so far hold.
type loadedParts struct {
	state persist.State
	news  []addressExtra
}

// partsDecoder decodes the parts of a checkpoint, at most maxCheckpointBytes
// decompressed in all.
type partsDecoder struct {
	dec     *zstd.Decoder
	workers int
	decoded atomic.Int64
}

// piece decodes the parts of one piece, workers at a time, and adds their
// state to st in the piece's order.
func (pd *partsDecoder) piece(st *loadedParts, parts []sharedstore.Part, bodies [][]byte) error {
	states := make([]loadedParts, len(parts))
	errs := make([]error, len(parts))
	slots := make(chan struct{}, pd.workers)
	var wg sync.WaitGroup
	for i := range parts {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			states[i], errs[i] = pd.part(parts[i], bodies[i])
		})
	}
	wg.Wait()
	for i, p := range parts {
		if errs[i] != nil {
			return fmt.Errorf("part %s: %w", breach.LabelValue(p.Name, breach.MaxValueBytes), errs[i])
		}
		if p.Name == metaPart {
			st.state.Watchlist.Accounts, st.state.Seen, st.state.SignedOnly = states[i].state.Watchlist.Accounts, states[i].state.Seen, states[i].state.SignedOnly
		}
		st.state.Watchlist.Entries = append(st.state.Watchlist.Entries, states[i].state.Watchlist.Entries...)
		st.news = append(st.news, states[i].news...)
	}
	return nil
}

// part decompresses, checks and decodes one part.
func (pd *partsDecoder) part(part sharedstore.Part, body []byte) (loadedParts, error) {
	raw, err := pd.dec.DecodeAll(body, nil)
	if err != nil {
		return loadedParts{}, err
	}
	if pd.decoded.Add(int64(len(raw))) > maxCheckpointBytes {
		return loadedParts{}, fmt.Errorf("over %d bytes decompressed", int64(maxCheckpointBytes))
	}
	return decodePart(part, raw)
}

// decodePart checks part's content raw and decodes it.
func decodePart(part sharedstore.Part, raw []byte) (loadedParts, error) {
	if partDigest(raw) != part.Digest {
		return loadedParts{}, errors.New("its content does not match its digest")
	}
	if i, ok := bucketIndex(part.Name, newsPrefix); ok {
		news, err := decodeNews(raw, i)
		return loadedParts{news: news}, err
	}
	ps, err := persist.DecodeShared(raw)
	if err != nil {
		return loadedParts{}, err
	}
	if part.Name == metaPart {
		return loadedParts{state: persist.State{Watchlist: watchlist.Saved{Accounts: ps.Watchlist.Accounts}, Seen: ps.Seen, SignedOnly: ps.SignedOnly}}, nil
	}
	i, ok := bucketIndex(part.Name, bucketPrefix)
	if !ok {
		return loadedParts{}, errors.New("not a part this release writes")
	}
	for _, e := range ps.Watchlist.Entries {
		if bucketOf(e.Address.Email) != i {
			return loadedParts{}, errors.New("an address of another part")
		}
	}
	return loadedParts{state: persist.State{Watchlist: watchlist.Saved{Entries: ps.Watchlist.Entries}}}, nil
}

// decodeNews reads the news part of bucket i: of its addresses only, in a
// version this release reads (the values are held to their bounds where
// the watchlist takes them, RestoreContinuity).
func decodeNews(raw []byte, i int) ([]addressExtra, error) {
	body, err := persist.Unframed(raw)
	if err != nil {
		return nil, err
	}
	var n newsPart
	if err := json.Unmarshal(body, &n); err != nil {
		return nil, err
	}
	if n.V < 1 || n.V > eventFormat {
		return nil, fmt.Errorf("%w: version %d", errLaterFormat, n.V)
	}
	for _, x := range n.News {
		if bucketOf(x.Key) != i {
			return nil, errors.New("news of an address of another part")
		}
	}
	return n.News, nil
}
