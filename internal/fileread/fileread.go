// SPDX-License-Identifier: Apache-2.0

// Package fileread is the one way breach_exporter reads a file a person
// points it at: the configuration, the API token, the webhook secrets, the
// label key, the acknowledgements, the address lists, the web configs and
// the TLS files they name; and, through ReadIn, the state snapshot that
// internal/persist finds in --storage.path. Such a path can be wrong in ways a plain
// os.ReadFile does not survive: a named pipe blocks the reader until
// someone writes (a reload then never ends), a device such as /dev/zero
// never ends at all, and a huge file costs many times its size once
// parsed. Read refuses all of them with an error naming the path, before
// the caller parses anything.
//
// It is a package of its own, not part of internal/config, because
// internal/acknowledge reads through it too and must not import config.
package fileread

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// The size limit of each kind of file, in one place. Each is far above any
// honest file of its kind and low enough that parsing the largest one
// costs tens of megabytes, not the process.
const (
	// MaxConfigBytes bounds the configuration file: 10,000 addresses with
	// an alias each take about 700 KB.
	MaxConfigBytes = 2 << 20
	// MaxSecretBytes bounds the API token, each webhook secret and the
	// label key: each is one line of at most a few hundred bytes.
	MaxSecretBytes = 4 << 10
	// MaxAcknowledgementsBytes bounds the acknowledgements file: an entry
	// with the longest by and comment takes about 450 bytes, so this holds
	// more than 9,000 of those and about 50,000 short ones. Parsed into yaml
	// nodes it costs about 30 times its size: a file at the limit allocated
	// 115 MB (measured), within the 384 MiB the examples give the process.
	MaxAcknowledgementsBytes = 4 << 20
	// MaxPageAcknowledgementsBytes bounds the state folder's file of the
	// acknowledgements made on the page (internal/persist): at most
	// 10,000 entries of about 600 bytes.
	MaxPageAcknowledgementsBytes = 8 << 20
	// MaxWebConfigBytes bounds an exporter-toolkit web config file (TLS
	// settings and basic-auth users with their bcrypt hashes).
	MaxWebConfigBytes = 1 << 20
	// MaxTLSFileBytes bounds a certificate, key or CA bundle file; the
	// largest public CA bundles are about 250 KB.
	MaxTLSFileBytes = 1 << 20
	// MaxAddressListBytes bounds a plain address file (one address a
	// line): 100,000 addresses of 30 bytes take 3 MB, so this holds about
	// half a million, and a file at the limit costs about its size again
	// once split into addresses (internal/addrfile).
	MaxAddressListBytes = 16 << 20
	// MaxAddressYAMLBytes bounds a YAML address list (.yml, .yaml): parsed
	// into yaml nodes, for the line of each item, it costs about 30 times
	// its size, as the acknowledgements do; 4 MiB still holds about
	// 150,000 addresses ("- " and a 25-byte address a line).
	MaxAddressYAMLBytes = 4 << 20
	// MaxAddressHTTPBytes bounds the body of an addresses_http answer
	// (internal/addrhttp), which is not a file but is parsed as a file of
	// addresses_sd_files is, so its limit lives here with theirs: the
	// same, for the same cost (about 30 times its size once parsed). A
	// body past it is a failure, read no further.
	MaxAddressHTTPBytes = MaxAddressYAMLBytes
	// MaxSnapshotBytes bounds the state snapshot internal/persist writes
	// and reads back: about 1.9 KB an address (docs/sizing.md), so 1 GiB
	// holds more than half a million addresses, more than the process
	// could serve. A snapshot over it is not written, and one found over
	// it is damaged.
	MaxSnapshotBytes = 1 << 30
	// MaxConfirmedBytes bounds the file of alerts the shared store
	// confirmed (internal/exporter), 65 bytes an alert: those accepted
	// since the last state snapshot, about a million.
	MaxConfirmedBytes = 64 << 20
)

// ErrNotRegular is the reason a path that is not a regular file (after
// symlinks) is refused: a named pipe, a device, a socket or a directory.
var ErrNotRegular = errors.New("not a regular file")

// TooLargeError is the reason a file over its limit is refused.
type TooLargeError struct{ Limit int64 }

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("larger than the limit of %d bytes for this file", e.Limit)
}

// Read returns the contents of the regular file at path (symlinks
// followed), at most limit bytes. Its errors are *fs.PathError naming the
// path; their Err is ErrNotRegular, a *TooLargeError or the system's.
//
// The path is checked before it is opened, so a named pipe or a device is
// normally never opened at all; it is opened without blocking
// (O_NONBLOCK, so a pipe swapped in meanwhile cannot hang the open) and
// checked again on the open file, which is what is read. A file that grows
// while it is read stops at limit+1 bytes and is refused.
func Read(path string, limit int64) ([]byte, error) {
	return read(path, os.Stat, func() (*os.File, error) {
		return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	}, limit)
}

// ReadIn is Read for the file name inside root (symlinks followed only
// within it): internal/persist reads its snapshot this way, through the
// folder it holds open rather than the path, which may name another folder
// by now. Errors name root's path joined with name.
func ReadIn(root *os.Root, name string, limit int64) ([]byte, error) {
	path := filepath.Join(root.Name(), name)
	stat := func(string) (fs.FileInfo, error) {
		info, err := root.Stat(name)
		if err != nil {
			return nil, renamed(err, path)
		}
		return info, nil
	}
	return read(path, stat, func() (*os.File, error) {
		f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
		return f, renamed(err, path)
	}, limit)
}

// renamed makes a *fs.PathError from os.Root name the whole path.
func renamed(err error, path string) error {
	if pe, ok := err.(*fs.PathError); ok {
		return &fs.PathError{Op: pe.Op, Path: path, Err: pe.Err}
	}
	return err
}

func read(path string, stat func(string) (fs.FileInfo, error), open func() (*os.File, error), limit int64) ([]byte, error) {
	if err := check(path, "stat", stat, limit); err != nil {
		return nil, err
	}
	f, err := open()
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := check(path, "fstat", func(string) (fs.FileInfo, error) { return f.Stat() }, limit); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: path, Err: err}
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Limit: limit}}
	}
	return data, nil
}

// check refuses what stat says is not a regular file or is over limit.
func check(path, op string, stat func(string) (fs.FileInfo, error), limit int64) error {
	info, err := stat(path)
	if err != nil {
		return err
	}
	if !info.Mode().IsRegular() {
		return &fs.PathError{Op: op, Path: path, Err: fmt.Errorf("%w (%s)", ErrNotRegular, kind(info.Mode()))}
	}
	if info.Size() > limit {
		return &fs.PathError{Op: op, Path: path, Err: &TooLargeError{Limit: limit}}
	}
	return nil
}

// kind names a file type the way its owner would.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}
