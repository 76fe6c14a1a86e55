// SPDX-License-Identifier: Apache-2.0

package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/breach-exporter/breach_exporter/internal/persist"
)

// The checkpoint at scale: the built binary as a replica of a real
// redis-server, over a state snapshot of many addresses, polling the
// simulator at the key's budget with no alert arriving (a quiet minute).
// Measured: every byte the replica sends to the store per quiet minute
// (INFO stats' total_net_input_bytes, checkpoint and all else), the
// store's memory once it holds the checkpoint (INFO memory's used_memory
// over the empty store's), and exec to /-/ready of a second replica that
// starts on an empty folder from the store, on the machine's cores (and
// once on one). Baselines of the same run: the
// state snapshot's size on disk (what every replica sent the store per
// snapshot interval when the checkpoint was the whole snapshot's
// encoding, and what the store's memory is held to), and exec to /-/ready
// of the binary without a store starting from that snapshot.

// The goals: a quiet minute must not cost the store more than a small
// share of what the whole snapshot did, a replica must start from the
// store within a rollout's patience, and the store must hold no more than
// twice what one replica keeps on disk.
const (
	goalCheckpointBytes = 1_000_000 // a replica's writes per quiet minute
	goalStoreStart      = 5.0       // seconds, exec to ready from the store
	goalStoreMemory     = 2.0       // the store's memory over one snapshot
)

// checkpointAddressFiles hold the addresses: a config file listing
// 100,000 is over its size bound.
const checkpointAddressFiles = 10

// CheckpointOptions size MeasureCheckpoint.
type CheckpointOptions struct {
	Exporter  string // the built binary; empty: built here
	Addresses int
	// QuietMinutes are measured after the first checkpoint is written.
	QuietMinutes int
	// Starts is how many replicas start from the store, each on an empty
	// folder; the fastest is kept (other load only adds time).
	Starts int
}

// CheckpointResult is what MeasureCheckpoint saw.
type CheckpointResult struct {
	Addresses     int   `json:"addresses"`
	SnapshotBytes int64 `json:"snapshot_bytes"`
	// FirstWriteBytes is what the store received from the start of the
	// replica until its first checkpoint was in the store.
	FirstWriteBytes int64 `json:"first_write_bytes"`
	// QuietBytes is what the store received in QuietMinutes, while the
	// replica wrote at least one checkpoint.
	QuietMinutes int       `json:"quiet_minutes"`
	QuietBytes   int64     `json:"quiet_bytes"`
	StoreMemory  int64     `json:"store_memory_bytes"`
	StartSamples []float64 `json:"start_samples"`
	StartSeconds float64   `json:"start_seconds"`
	// OneCoreStartSeconds is one more start from the store, with
	// GOMAXPROCS=1; the others (and the folder's) use every core.
	OneCoreStartSeconds float64   `json:"one_core_start_seconds"`
	FolderSamples       []float64 `json:"folder_start_samples"`
	FolderSeconds       float64   `json:"folder_start_seconds"`
}

func (o CheckpointOptions) check() error {
	if o.Addresses < 1 || o.QuietMinutes < 1 || o.Starts < 1 {
		return errors.New("checkpoint: at least 1 address, 1 quiet minute and 1 start")
	}
	return nil
}

// MeasureCheckpoint runs it.
func MeasureCheckpoint(o CheckpointOptions) (CheckpointResult, error) {
	res := CheckpointResult{Addresses: o.Addresses, QuietMinutes: o.QuietMinutes}
	if err := o.check(); err != nil {
		return res, err
	}
	rs, err := newRestoredSetup("breach-bench-checkpoint-", o.Addresses, checkpointAddressFiles, false, "")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(rs.dir)
	info, err := os.Stat(filepath.Join(rs.storage, persist.FileName))
	if err != nil {
		return res, err
	}
	res.SnapshotBytes = info.Size()
	client := newScrapeClient()
	defer client.CloseIdleConnections()

	// The baseline start: the snapshot from the state folder, no store.
	if res.FolderSamples, err = timeStarts(o.Starts, func(int) (float64, error) {
		return timeReady(client, o.Exporter, rs.dir, rs.storage, o.Addresses, false)
	}); err != nil {
		return res, fmt.Errorf("start from the state folder: %w", err)
	}
	res.FolderSeconds = slices.Min(res.FolderSamples)

	server, err := startRedis()
	if err != nil {
		return res, err
	}
	defer server.stop()
	rdb := redis.NewClient(&redis.Options{Addr: server.addr})
	defer rdb.Close()
	ctx := context.Background()
	empty, err := redisInfo(ctx, rdb, "memory", "used_memory")
	if err != nil {
		return res, err
	}
	api, err := newSimulatorAPI(rs.creds, rs.emails, nil)
	if err != nil {
		return res, err
	}
	defer api.stop()
	prefix := "bench-" + randomHex(4)
	storeDir := filepath.Join(rs.dir, "replicas")
	if err := os.Mkdir(storeDir, 0o700); err != nil {
		return res, err
	}
	setup := exporterSetup{baseURL: api.baseURL, emails: rs.emails, requestsPerMinute: 60, storeURL: server.url(), storePrefix: prefix,
		addressFiles: checkpointAddressFiles}
	if err := writeExporterFiles(storeDir, setup, rs.creds); err != nil {
		return res, err
	}
	writer, err := quietWriter(ctx, rdb, o.Exporter, storeDir, rs.storage, prefix, &res)
	if err != nil {
		return res, err
	}
	defer writer.kill()
	used, err := redisInfo(ctx, rdb, "memory", "used_memory")
	if err != nil {
		return res, err
	}
	res.StoreMemory = used - empty
	if err := quietMinutes(ctx, rdb, writer, prefix, &res); err != nil {
		return res, err
	}

	if res.StartSamples, err = timeStarts(o.Starts+1, func(i int) (float64, error) {
		return timeReady(client, o.Exporter, storeDir, filepath.Join(rs.dir, fmt.Sprintf("empty-%d", i)), o.Addresses, i == o.Starts)
	}); err != nil {
		return res, fmt.Errorf("start from the store: %w", err)
	}
	// The last start ran on one core, as the other start figures do.
	res.OneCoreStartSeconds = res.StartSamples[o.Starts]
	res.StartSamples = res.StartSamples[:o.Starts]
	res.StartSeconds = slices.Min(res.StartSamples)
	return res, nil
}

// timeStarts runs start n times and returns each time.
func timeStarts(n int, start func(i int) (float64, error)) ([]float64, error) {
	var out []float64
	for i := range n {
		took, err := start(i)
		if err != nil {
			return nil, err
		}
		out = append(out, took)
	}
	return out, nil
}

// quietWriter starts the replica that writes the checkpoint, on the
// snapshot's folder, and waits until the store holds its first
// checkpoint.
func quietWriter(ctx context.Context, rdb *redis.Client, bin, dir, storage, prefix string, res *CheckpointResult) (*exporterProcess, error) {
	before, err := redisInfo(ctx, rdb, "stats", "total_net_input_bytes")
	if err != nil {
		return nil, err
	}
	p, err := startExporter(bin, dir, storage, "1m", true)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if n, _ := rdb.Exists(ctx, prefix+":checkpoint").Result(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			return p, p.failed(errors.New("no checkpoint in the store within 2 minutes"))
		}
		select {
		case <-p.exited:
			return p, p.failed(errors.New("the replica exited"))
		case <-time.After(100 * time.Millisecond):
		}
	}
	after, err := redisInfo(ctx, rdb, "stats", "total_net_input_bytes")
	res.FirstWriteBytes = after - before
	return p, err
}

// quietMinutes counts what the store receives while the writer polls for
// res.QuietMinutes, and checks that the checkpoint moved meanwhile.
func quietMinutes(ctx context.Context, rdb *redis.Client, writer *exporterProcess, prefix string, res *CheckpointResult) error {
	id := func() (string, error) { return rdb.HGet(ctx, prefix+":checkpoint", "id").Result() }
	id0, err := id()
	if err != nil {
		return err
	}
	before, err := redisInfo(ctx, rdb, "stats", "total_net_input_bytes")
	if err != nil {
		return err
	}
	// Waiting for the clock is the measurement: the snapshot interval is
	// a real minute.
	select {
	case <-time.After(time.Duration(res.QuietMinutes) * time.Minute):
	case <-writer.exited:
		return writer.failed(errors.New("the replica exited"))
	}
	after, err := redisInfo(ctx, rdb, "stats", "total_net_input_bytes")
	if err != nil {
		return err
	}
	id1, err := id()
	if err != nil {
		return err
	}
	res.QuietBytes = after - before
	if id1 == id0 {
		return writer.failed(fmt.Errorf("no checkpoint written in %d quiet minutes: the figure would measure none", res.QuietMinutes))
	}
	return nil
}

// timeReady times exec to /-/ready of the binary on the config in dir and
// the folder storage (killed after: it writes no snapshot), then checks
// that it serves every address.
func timeReady(client *http.Client, bin, dir, storage string, addresses int, oneCore bool) (float64, error) {
	p, err := startExporter(bin, dir, storage, "1h", oneCore)
	if err != nil {
		return 0, err
	}
	defer p.kill()
	if err := waitServing(client, "http://"+p.web+"/-/ready", p.exited); err != nil {
		return 0, p.failed(err)
	}
	took := time.Since(p.started).Seconds()
	s, err := scrapeOnce(client, "http://"+p.web+"/metrics", true)
	if err != nil {
		return 0, p.failed(err)
	}
	if n := servedAddresses(s.body); n != addresses {
		return 0, p.failed(fmt.Errorf("ready serving %d addresses, want %d", n, addresses))
	}
	return took, nil
}

// servedAddresses counts the addresses whose state is served.
func servedAddresses(exposition []byte) int {
	n := 0
	for line := range bytes.Lines(exposition) {
		if bytes.HasPrefix(line, []byte("breach_address_state{")) && bytes.HasSuffix(line, []byte(" 1\n")) {
			n++
		}
	}
	return n
}

// redisInfo reads one number of an INFO section.
func redisInfo(ctx context.Context, rdb *redis.Client, section, field string) (int64, error) {
	text, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return 0, err
	}
	s := bufio.NewScanner(strings.NewReader(text))
	for s.Scan() {
		if v, ok := strings.CutPrefix(strings.TrimSpace(s.Text()), field+":"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("INFO %s has no %s", section, field)
}

func checkpointFigures(c *CheckpointResult) []Figure {
	if c == nil {
		return nil
	}
	n := fmt.Sprintf("%d addr", c.Addresses)
	perMinute := float64(c.QuietBytes) / float64(c.QuietMinutes)
	return []Figure{
		newFigure("store checkpoint bytes per quiet minute, "+n, "bytes", perMinute, float64(c.SnapshotBytes), "the whole snapshot's encoding").
			withGoal("<= 1 MB", perMinute <= goalCheckpointBytes),
		newFigure("start from the store, "+n, "s", c.StartSeconds, c.FolderSeconds, "from the state folder, no store").
			withGoal(fmt.Sprintf("<= %.0f s", goalStoreStart), c.StartSeconds <= goalStoreStart),
		newFigure("store memory vs state snapshot, "+n, "bytes", float64(c.StoreMemory), float64(c.SnapshotBytes), "the state snapshot on disk").
			withGoal(fmt.Sprintf("ratio <= %.0f", goalStoreMemory), float64(c.StoreMemory) <= goalStoreMemory*float64(c.SnapshotBytes)),
	}
}
