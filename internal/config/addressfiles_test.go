// SPDX-License-Identifier: Apache-2.0

package config

import (
	"strings"
	"testing"
)

func TestValidateAddressesFiles(t *testing.T) {
	_, err := parseFile(t, minimalYAML+"refresh: {files_interval: 0s}\n"+
		"addresses_files: ['a/*.txt', 'a/*.txt', '', 'b/[.txt', 'c*/x.txt']\n")
	for _, want := range []string{
		"refresh.files_interval: 0s must be greater than 0",
		`addresses_files[1]: "a/*.txt" duplicates addresses_files[0]`,
		"addresses_files[2]: empty path",
		`addresses_files[3]: "b/[.txt" is not a valid glob`,
		`addresses_files[4]: "c*/x.txt": wildcards only in the file name`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// --config.check (AddressFiles) reports every problem of every address
// file with its file and line; a start or a reload does not read them.
func TestLoadBundleChecksAddressFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "token", "svc_ak_test\n")
	plain := writeFile(t, dir, "hr.txt", "alice@example.com\nnot-an-address\n")
	broken := writeFile(t, dir, "it.yaml", "- a@example.com\n- [\n")
	empty := writeFile(t, dir, "empty.txt", "# nobody\n")
	path := writeFile(t, dir, "config.yml", "api: {base_url: 'https://x.org/api/v1', token_file: token}\n"+
		"labels: {address: hash}\naddresses_files: ['*.txt', '*.yaml']\n")

	if _, err := LoadBundle(path, LoadOptions{}); err != nil {
		t.Fatalf("a start: %v, want no error from the address files", err)
	}
	_, err := LoadBundle(path, LoadOptions{AddressFiles: true})
	for _, want := range []string{
		plain + ":2: addresses_files: not a valid email address",
		broken + ": not valid YAML: line 2",
		empty + ": no valid address",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "not-an-address") {
		t.Error("in hash mode an invalid line must not be shown")
	}
}
