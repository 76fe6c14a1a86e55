// SPDX-License-Identifier: Apache-2.0

package exporter

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/go-kit/log/level"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
	"github.com/breach-exporter/breach_exporter/internal/persist"
	"github.com/breach-exporter/breach_exporter/internal/ratelog"
	"github.com/breach-exporter/breach_exporter/internal/sharedstore"
	"github.com/breach-exporter/breach_exporter/internal/watchlist"
)

// The publish protocol of accepted alerts (docs/replicas.md, "What 204
// means"):
//
//  1. The receiver makes the alert durable in this replica's journal and
//     answers 204.
//  2. forward publishes it once per digest (sharedstore.PublishOnceBatch:
//     one script that adds the entry, then its seen key; a failure leaves
//     neither). With the store's replicas online, the publish waits for
//     one of them to hold it (WAIT, 1 s); until one does, the alert stays
//     in the backlog and is published again (the store recognises this
//     replica's own entry).
//  3. This replica writes the digest to its confirmed file, in the state
//     folder, fsynced: from then on it never publishes that alert again,
//     whatever the store lost (a FLUSHALL, a failover, an older RDB).
//  4. The alert leaves the backlog for mine, until this replica applied
//     it (mine.go: from the stream, or from mine when the store lost the
//     entry first); no local snapshot is written meanwhile. The next
//     snapshot then holds the state after it, and the journal records
//     before it go, and so do their confirmed digests.
//
// A replayed alert whose digest is confirmed is not published; one that is
// not (the replica stopped between 1 and 3) is, and the store's seen key
// finds it when it was added.

// confirmedName is the file of confirmed digests in the state folder.
const confirmedName = "store-confirmed"

// maxConfirmed bounds the confirmed digests kept (about 100 bytes each in
// memory): those of the alerts accepted since the last state snapshot,
// which a healthy replica writes every interval. Past it, an alert's
// confirmation is not kept (breach_exporter_store_confirmations_dropped_total):
// after a crash its replay relies on the store's seen key alone.
const maxConfirmed = 1_000_000

// confirmed is the set of alerts the store confirmed that the journal may
// replay: the digests, each with the order it was confirmed in, kept in
// memory and in a file of the state folder.
type confirmed struct {
	mu      sync.Mutex
	root    *os.Root // nil without a state folder: nothing is kept
	file    *os.File
	seq     uint64
	digest  map[[sha256.Size]byte]uint64
	logs    *ratelog.Limiter
	dropped prometheus.Counter
}

func newConfirmed() confirmed {
	return confirmed{
		digest: map[[sha256.Size]byte]uint64{},
		logs:   ratelog.New(time.Minute, nil),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "breach_exporter_store_confirmations_dropped_total",
			Help: "Alerts the store confirmed whose confirmation this replica did not keep in its state folder (more than 1,000,000 since the last state snapshot): after a crash their replay relies on the store's duplicate keys alone.",
		}),
	}
}

// openConfirmed reads the confirmed file of the state folder (none: a
// first start) and opens it to append; without a folder it keeps nothing.
// A file that cannot be read is started afresh: the store's seen keys
// then stand alone, as before.
func (r *replicas) openConfirmed(folder *persist.Folder) error {
	if folder == nil {
		return nil
	}
	c := &r.confirmed
	root := folder.Root()
	c.root = root
	data, err := fileread.ReadIn(root, confirmedName, fileread.MaxConfirmedBytes)
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		level.Warn(r.logger).Log("msg", "The file of alerts the store confirmed cannot be read; starting it afresh", "err", err)
		flags |= os.O_TRUNC
	}
	for line := range bytes.Lines(data) {
		var d [sha256.Size]byte
		if n, err := hex.Decode(d[:], bytes.TrimSpace(line)); err == nil && n == len(d) && len(c.digest) < maxConfirmed {
			c.seq++
			c.digest[d] = c.seq
		}
	}
	c.file, err = root.OpenFile(confirmedName, flags, 0o600)
	return err
}

// has reports whether the store confirmed the alert of digest d.
func (c *confirmed) has(d [sha256.Size]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.digest[d]
	return ok
}

// add keeps the digests of alerts the store confirmed, durable before it
// returns.
func (c *confirmed) add(batch []forwarded) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.file == nil {
		return nil
	}
	var buf bytes.Buffer
	for _, f := range batch {
		if len(c.digest) >= maxConfirmed {
			c.dropped.Inc()
			continue
		}
		c.seq++
		c.digest[f.alert.Digest] = c.seq
		fmt.Fprintf(&buf, "%x\n", f.alert.Digest)
	}
	if _, err := c.file.Write(buf.Bytes()); err != nil {
		return err
	}
	return c.file.Sync()
}

// mark is where the confirmed digests are at a snapshot's cut.
func (c *confirmed) mark() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// compact forgets the digests confirmed up to mark, once the snapshot cut
// at mark is written and the journal records it holds are gone: none of
// them can be replayed. (Every alert confirmed after the cut was accepted
// after it, or the snapshot was not written: it waits for none.)
func (c *confirmed) compact(mark uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.file == nil {
		return nil
	}
	var buf bytes.Buffer
	for d, seq := range c.digest {
		if seq <= mark {
			delete(c.digest, d)
			continue
		}
		fmt.Fprintf(&buf, "%x\n", d)
	}
	const tmp = confirmedName + ".tmp"
	if err := writeSynced(c.root, tmp, buf.Bytes()); err != nil {
		return err
	}
	if err := c.root.Rename(tmp, confirmedName); err != nil {
		return err
	}
	c.file.Close()
	var err error
	c.file, err = c.root.OpenFile(confirmedName, os.O_WRONLY|os.O_APPEND, 0o600)
	return err
}

func writeSynced(root *os.Root, name string, data []byte) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	_, err = w.Write(data)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// replayed reports whether a replayed alert was confirmed by the store
// before the restart: it is then not published again.
func (r *replicas) replayed(a watchlist.AcceptedAlert) bool {
	return r.confirmed.has(a.Digest)
}

// publishBatch publishes a batch of the backlog and, once the store (and
// one of its replicas, when it has any) holds it, keeps its digests as
// confirmed. It returns each alert's ID as PublishOnceBatch does; batch is
// the buffer of the events, kept from one call to the next; epoch is
// mineEpoch before the publish (keepMine).
func (r *replicas) publishBatch(ctx context.Context, next []forwarded, batch *[]sharedstore.Once, epoch uint64) ([]string, error) {
	*batch = (*batch)[:0]
	for _, f := range next {
		*batch = append(*batch, sharedstore.Once{Digest: hex.EncodeToString(f.alert.Digest[:]), Kind: eventAlert, Data: persist.EncodeAlert(f.alert)})
	}
	opCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	ids, err := r.shared.PublishOnceBatch(opCtx, r.dedupTTL(), *batch)
	cancel()
	if err != nil {
		return nil, err
	}
	// Before the confirmed file's sync: the stream brings the batch back
	// meanwhile, and apply takes what keepMine holds without decoding it.
	r.keepMine(next, ids, epoch)
	if err := r.confirmed.add(next); err != nil {
		// The alerts are in the store: they go on. Only a crash now
		// together with the store losing them would count them twice.
		if suppressed, ok := r.confirmed.logs.Allow("write"); ok {
			level.Warn(r.logger).Log("msg", "Could not write the alerts the store confirmed to the state folder", "err", err, ratelog.SuppressedKey, suppressed)
		}
	}
	return ids, nil
}

// join checks the store's identity before the start reads from it: a
// store of another deployment refuses the start. A store that does not
// answer is checked once it does (sharedstore.Client.Run); until then no
// command reaches it.
func (r *replicas) join() error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err := r.shared.Join(ctx)
	var foreign *sharedstore.ErrForeign
	if errors.As(err, &foreign) {
		return err
	}
	level.Info(r.logger).Log("msg", "This deployment's identity in the store (store.deployment pins it)", "deployment", r.deployment)
	return nil
}

// confirmedMark is where the confirmed digests are at a snapshot's cut; 0
// without a store.
func (r *replicas) confirmedMark() uint64 {
	if r == nil {
		return 0
	}
	return r.confirmed.mark()
}

// compactConfirmed forgets the confirmed digests up to mark once the
// snapshot cut at mark is written and the journal dropped its records.
func (r *replicas) compactConfirmed(mark uint64) {
	if r == nil {
		return
	}
	if err := r.confirmed.compact(mark); err != nil {
		level.Warn(r.logger).Log("msg", "Could not rewrite the file of alerts the store confirmed; it is rewritten after the next snapshot", "err", err)
	}
}

// stop is the start of the shutdown: the commands in flight end now, and
// every later one (what Run's goroutines still send, the last checkpoint,
// the serving lease's release) by one deadline sharedstore.StopBound from
// now: a store that hangs delays the exit by at most that. An alert the
// store did not take meanwhile stays in the journal for the next start.
func (r *replicas) stop() { r.shared.Interrupt() }

// close closes the confirmed file and the store's client.
func (r *replicas) close() {
	r.confirmed.close()
	r.shared.Close()
}

func (c *confirmed) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.file != nil {
		c.file.Close()
		c.file = nil
	}
}
