// SPDX-License-Identifier: Apache-2.0

package systemtest

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The README's flag table is the --help output's flags with their
// defaults: no flag missing, none extra, no default drifted.
func TestREADMEFlagTableIsTheHelpOutput(t *testing.T) {
	out, err := exec.Command(binary(t, "builds the binary"), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	// "--web.max-connections=512", "--[no-]config.check", `--webhook.path="/webhook"`.
	// A flag's line starts "  -h, --" or "      --"; its help text is
	// indented further and may name other flags.
	helpFlag := regexp.MustCompile(`(?m)^(?:  -\w, |      )--(\[no-\])?([a-z][a-z0-9.-]*)(?:=("[^"]*"|\S+))?`)
	help := map[string]string{}
	for _, m := range helpFlag.FindAllStringSubmatch(string(out), -1) {
		if m[2] == "help" {
			continue
		}
		help[m[2]] = strings.Trim(m[3], `"`)
	}

	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `--([a-z][a-z0-9.-]*)` \\|([^|]*)\\|")
	table := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		table[m[1]] = strings.Trim(strings.TrimSpace(m[2]), "`")
	}
	if len(help) < 10 || len(table) == 0 {
		t.Fatalf("read %d flags from --help and %d from the README: the parsing is wrong\n%s", len(help), len(table), out)
	}
	for name, def := range help {
		documented, ok := table[name]
		switch {
		case !ok:
			t.Errorf("--%s (default %q) is missing from the README's flag table", name, def)
		case documented != def:
			t.Errorf("the README gives --%s the default %q; --help says %q", name, documented, def)
		}
	}
	for name := range table {
		if _, ok := help[name]; !ok {
			t.Errorf("the README's flag table lists --%s, which --help does not", name)
		}
	}
}
