package addrfile_test

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kit/log"
	"github.com/jonboulle/clockwork"

	"github.com/breach-exporter/breach_exporter/internal/addrfile"
	"github.com/breach-exporter/breach_exporter/internal/testkit"
)

// configMapSwap updates dir the way the kubelet updates a ConfigMap
// volume: the files are symlinks through ..data, a symlink to a
// timestamped directory; an update writes a new directory and renames a
// new ..data over the old one.
func configMapSwap(t *testing.T, dir, version string, files map[string]string) {
	t.Helper()
	data := filepath.Join(dir, "..v"+version)
	if err := os.Mkdir(data, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		testkit.WriteFile(t, filepath.Join(data, name), content)
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); os.IsNotExist(err) {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink("..v"+version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
}

// The watcher reads after a write, after a ConfigMap's ..data swap, and
// on its timer.
func TestWatcher(t *testing.T) {
	dir := t.TempDir()
	configMapSwap(t, dir, "1", map[string]string{"hr.txt": "alice@example.com\n"})
	clock := clockwork.NewFakeClock()
	w, err := addrfile.NewWatcher(log.NewNopLogger(), clock)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := addrfile.NewSource(nil)
	var globs atomic.Pointer[[]string] // what a reload would change
	globs.Store(&[]string{filepath.Join(dir, "*.txt")})
	reads := make(chan addrfile.Read, 100)
	kick := make(chan struct{}, 1)
	testkit.Go(t, func(ctx context.Context) {
		w.Run(ctx, kick, func() ([]string, time.Duration) { return *globs.Load(), time.Minute }, func() {
			reads <- s.Read(*globs.Load(), clock.Now(), false)
		})
	})
	// Each step waits (with a deadline) for a read that shows its change.
	waitFor := func(what string, want string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for {
			select {
			case r := <-reads:
				if len(r.Files) == 1 && len(r.Files[0].Addresses) == 1 && r.Files[0].Addresses[0].Email == want {
					return
				}
			case <-deadline:
				t.Fatalf("no read after %s", what)
			}
		}
	}
	testkit.BlockUntilWaiting(t, clock) // watching
	configMapSwap(t, dir, "2", map[string]string{"hr.txt": "bob@example.com\n"})
	waitFor("a ..data swap", "bob@example.com")

	plain := filepath.Join(dir, "plain.txt")
	globs.Store(&[]string{plain})
	kick <- struct{}{}
	testkit.WriteFile(t, plain, "carol@example.com\n")
	waitFor("a write", "carol@example.com")
	testkit.WriteFile(t, plain, "dave@example.com\n")
	waitFor("a write", "dave@example.com")

	testkit.BlockUntilWaiting(t, clock)
	clock.Advance(time.Minute)
	waitFor("the timer", "dave@example.com")
}
