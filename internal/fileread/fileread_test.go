// SPDX-License-Identifier: Apache-2.0

package fileread

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	if err := os.WriteFile(path, []byte("svc_ak_x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, link} {
		data, err := Read(p, MaxSecretBytes)
		if err != nil || string(data) != "svc_ak_x\n" {
			t.Errorf("Read(%s) = %q, %v", p, data, err)
		}
	}
	// Exactly the limit is allowed; one byte more is not.
	if _, err := Read(path, 9); err != nil {
		t.Errorf("a file of exactly the limit: %v", err)
	}
	_, err := Read(path, 8)
	var tooLarge *TooLargeError
	if !errors.As(err, &tooLarge) || tooLarge.Limit != 8 || !strings.Contains(err.Error(), path) {
		t.Errorf("a file over the limit: %v, want a TooLargeError naming the path", err)
	}
}

// Each refused shape ends promptly with an error naming the path: a pipe
// with no writer must not block, a device must not be read, a directory is
// no file.
func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		fifo:                            "a named pipe",
		zero:                            "a device",
		dir:                             "a directory",
		filepath.Join(dir, "fifo-link"): "a named pipe",
	}
	if err := os.Symlink(fifo, filepath.Join(dir, "fifo-link")); err != nil {
		t.Fatal(err)
	}
	for path, want := range cases {
		done := make(chan error, 1)
		go func() {
			_, err := Read(path, MaxConfigBytes)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), path) {
				t.Errorf("Read(%s) = %v, want ErrNotRegular naming %q and the path", path, err, want)
			}
		case <-time.After(10 * time.Second):
			// A deadline, not a sleep: the read is expected back at once.
			t.Fatalf("Read(%s) blocked", path)
		}
	}
	_, err := Read(filepath.Join(dir, "missing"), MaxConfigBytes)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want ErrNotExist", err)
	}
}

// A file under the limit when checked that is read past it (a regular file
// that reports a size below what it holds, as /proc files do) is cut at
// limit+1 bytes and refused.
func TestReadBoundsWhatIsRead(t *testing.T) {
	// /proc/self/maps is regular, reports size 0 and holds more than a
	// few bytes.
	const path = "/proc/self/maps"
	if _, err := os.Stat(path); err != nil {
		t.Skip("no /proc here")
	}
	_, err := Read(path, 16)
	var tooLarge *TooLargeError
	if !errors.As(err, &tooLarge) {
		t.Fatalf("Read(%s, 16) = %v, want TooLargeError", path, err)
	}
}

// ReadIn refuses the same shapes inside a folder held open, and its errors
// name the whole path.
func TestReadInRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "big"), make([]byte, 11), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ok"), []byte("0123456789"), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	done := make(chan error, 1)
	go func() { _, err := ReadIn(root, "fifo", 10); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) || !strings.Contains(err.Error(), filepath.Join(dir, "fifo")) {
			t.Errorf("a named pipe: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadIn blocked on a named pipe")
	}
	var tooLarge *TooLargeError
	if _, err := ReadIn(root, "big", 10); !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), filepath.Join(dir, "big")) {
		t.Errorf("a file over the limit: %v", err)
	}
	if _, err := ReadIn(root, "missing", 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want ErrNotExist", err)
	}
	if data, err := ReadIn(root, "ok", 10); err != nil || string(data) != "0123456789" {
		t.Errorf("a file at the limit: %q, %v", data, err)
	}
}
