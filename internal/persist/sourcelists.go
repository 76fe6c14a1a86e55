// SPDX-License-Identifier: Apache-2.0

package persist

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"strings"

	"github.com/breach-exporter/breach_exporter/internal/fileread"
)

// sourceListPrefix starts the name of the file, inside --storage.path, of
// the last good list of one HTTP source of addresses (addresses_http):
// the body as the source answered it, so that a start while the source
// fails begins from the list it last gave rather than from none. A file
// of its own per URL, beside the snapshot, for the reason PageFileName
// is: the snapshot's reader refuses unknown members.
const sourceListPrefix = "addresses_http-"

// sourceListName is the file of url's list: a digest, since a URL is no
// file name.
func sourceListName(url string) string {
	sum := sha256.Sum256([]byte(url))
	return sourceListPrefix + hex.EncodeToString(sum[:8]) + ".json"
}

// SaveSourceList writes url's last good list atomically.
func (s *Folder) SaveSourceList(url string, body []byte) error {
	return write(s.folder.root, sourceListName(url), body)
}

// LoadSourceList returns url's saved list; nil without one.
func (s *Folder) LoadSourceList(url string) ([]byte, error) {
	data, err := fileread.ReadIn(s.folder.root, sourceListName(url), fileread.MaxAddressHTTPBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return data, err
}

// KeepSourceLists removes the saved lists of every URL but urls: a
// source the config no longer has leaves no file behind.
func (s *Folder) KeepSourceLists(urls []string) error {
	keep := map[string]bool{}
	for _, u := range urls {
		keep[sourceListName(u)] = true
	}
	entries, err := fs.ReadDir(s.folder.root.FS(), ".")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if name := e.Name(); strings.HasPrefix(name, sourceListPrefix) && strings.HasSuffix(name, ".json") && !keep[name] {
			errs = append(errs, s.folder.root.Remove(name))
		}
	}
	return errors.Join(errs...)
}
