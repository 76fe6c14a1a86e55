// SPDX-License-Identifier: Apache-2.0

package persist

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LockName is the lock file inside --storage.path. It holds the owner's
// pid, for whoever finds the folder taken, and is locked too, for an
// exporter of 0.2.0 or older on the same folder, which locks only it.
const LockName = "lock"

// errFolderMoved: --storage.path no longer names the folder the exporter
// opened and locked at start. The exporter refuses to write anywhere
// rather than re-open: a re-open would have to carry the state over into
// a folder another exporter may lock meanwhile, and the old folder's
// journal would be left behind. What is written to the old folder would
// be lost to the next start on the path, so a write there is refused;
// writes resume if the path names the folder again.
var errFolderMoved = errors.New("the state folder was moved, removed or replaced since the start: --storage.path names another folder or none; restart the exporter to use the folder it names")

// lockedDir is --storage.path held for the life of the process: the folder
// opened once, whose files are all reached through that open folder (an
// os.Root), never through the path again, so nothing is ever written into
// a folder that replaced it; the lock; and the folder's identity, to tell
// whether the path still names it.
type lockedDir struct {
	path string
	root *os.Root
	// dir is the folder itself, locked: the lock is the folder's, however
	// its lock file is removed or replaced.
	dir  *os.File
	lock *os.File
	dev  uint64
	ino  uint64
}

// openFolder makes path (and its parents) if needed, opens it and locks
// it, refusing a folder another process holds with an error that names the
// folder and the holder's pid.
func openFolder(path string) (_ *lockedDir, err error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(path)
	if err != nil {
		return nil, err
	}
	f := &lockedDir{path: path, root: root}
	defer func() {
		if err != nil {
			f.close()
		}
	}()
	if f.dir, err = root.Open("."); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.dir.Fd()), &st); err != nil {
		return nil, err
	}
	f.dev, f.ino = uint64(st.Dev), st.Ino // Dev is int32 on macOS
	if err := f.flock(f.dir); err != nil {
		return nil, err
	}
	// O_NONBLOCK: a FIFO put in the lock file's place cannot block the
	// start; a regular file ignores it.
	if f.lock, err = root.OpenFile(LockName, os.O_RDWR|os.O_CREATE|unix.O_NONBLOCK, 0o600); err != nil {
		return nil, err
	}
	if fi, err := f.lock.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s/%s is not a regular file", path, LockName)
	}
	if err := f.flock(f.lock); err != nil {
		return nil, err
	}
	// The id is for people; the lock works without it.
	if f.lock.Truncate(0) == nil {
		_, _ = f.lock.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// flock takes an exclusive lock on file for the life of the process. The
// kernel releases it when the process ends, however it ends: a killed
// exporter's folder is free at once.
func (f *lockedDir) flock(file *os.File) error {
	err := unix.Flock(int(file.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return fmt.Errorf("the folder is in use by another process (pid %s, in %s/%s): one exporter per --storage.path",
			f.holder(), f.path, LockName)
	}
	if err != nil {
		return fmt.Errorf("locking %s: %w", f.path, err)
	}
	return nil
}

// holder reads the pid the lock file names, if it is there.
func (f *lockedDir) holder() string {
	file, err := f.root.OpenFile(LockName, os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return "unknown"
	}
	defer file.Close()
	buf := make([]byte, 32) // a pid and a newline
	n, _ := io.ReadFull(file, buf)
	if pid := strings.TrimSpace(string(buf[:n])); pid != "" {
		return pid
	}
	return "unknown"
}

// check tells whether the path names the folder held open now (after
// symlinks): one stat. The held folder keeps its inode number from being
// reused, so a folder made anew at the path never passes.
func (f *lockedDir) check() error {
	var st unix.Stat_t
	if err := unix.Stat(f.path, &st); err != nil {
		return fmt.Errorf("%w (%v)", errFolderMoved, err)
	}
	if uint64(st.Dev) != f.dev || st.Ino != f.ino {
		return errFolderMoved
	}
	return nil
}

// syncDir makes the folder's entries durable: a file created or renamed
// survives a power loss only once its folder is synced.
func (f *lockedDir) syncDir() error { return f.dir.Sync() }

// close releases the lock and the folder.
func (f *lockedDir) close() error {
	var errs []error
	for _, file := range []*os.File{f.lock, f.dir} {
		if file != nil {
			errs = append(errs, file.Close())
		}
	}
	return errors.Join(append(errs, f.root.Close())...)
}
