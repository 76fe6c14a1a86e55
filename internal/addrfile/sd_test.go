// SPDX-License-Identifier: Apache-2.0

package addrfile_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/breach-exporter/breach_exporter/internal/addrfile"
	"github.com/breach-exporter/breach_exporter/internal/breach"
)

var teamOwner = []string{"team", "owner"}

// JSON and YAML in file_sd shape give the same addresses, each with its
// group's labels in name order; what is not usable is an invalid line at
// its line, and the rest of the group stands.
func TestParseSD(t *testing.T) {
	payments := []breach.Label{{Name: "owner", Value: "jdoe"}, {Name: "team", Value: "payments"}}
	want := []breach.Address{
		{Email: "a@example.com", Labels: payments},
		{Email: "b@example.com", Labels: payments},
		{Email: "c@example.com", Labels: []breach.Label{{Name: "team", Value: "platform"}}},
		{Email: "d@example.com"},
	}
	for name, data := range map[string]string{
		"owners.json": `[
{"targets": ["a@example.com", "b@example.com"], "labels": {"team": "payments", "owner": "jdoe"}},
{"targets": ["c@example.com", "nope", 7], "labels": {"team": "platform", "floor": "3", "owner": ["x"]}},
{"targets": ["d@example.com"], "labels": {"x@example.com": "y"}},
"not a group",
{"labels": {"team": "x"}, "port": 80}
]`,
		"owners.yml": `- targets: [a@example.com, b@example.com]
  labels: {team: payments, owner: jdoe}
- targets: [c@example.com, nope, 7]
  labels: {team: platform, floor: "3", owner: [x]}
- targets: [d@example.com]
  labels: {x@example.com: y}
- not a group
- labels: {team: x}
  port: 80
`,
	} {
		addrs, invalid, err := addrfile.ParseSD(name, []byte(data), false, teamOwner)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.EqualFunc(addrs, want, breach.Address.Equal) {
			t.Errorf("%s: addresses %+v, want %+v", name, addrs, want)
		}
		var reasons []string
		for _, l := range invalid {
			reasons = append(reasons, l.Error())
		}
		got := strings.Join(reasons, "\n")
		for _, l := range []struct {
			json, yaml int
			reason     string
		}{
			{3, 4, `label "floor" is not one of owner_labels (team, owner)`},
			{3, 4, `label "owner": the value must be a string`},
			{3, 3, "not a valid email address"},
			{3, 3, "not an address: must be a string"},
			{4, 6, "label (an address) is not one of owner_labels"},
			{5, 7, "not a group"},
			{6, 9, `unknown key "port"`},
			{6, 8, "a group needs targets"},
		} {
			line := l.json
			if name == "owners.yml" {
				line = l.yaml
			}
			if w := fmt.Sprintf("%s:%d: %s", name, line, l.reason); !strings.Contains(got, w) {
				t.Errorf("%s: invalid lines\n%s\nlack %q", name, got, w)
			}
		}
		if strings.Contains(got, "nope") || strings.Contains(got, "x@example.com") {
			t.Errorf("%s: an invalid target is shown outside email mode: %s", name, got)
		}
	}
}

// A file in file_sd shape that is not usable as a whole fails, and keeps
// its last good content; a value past the cap is skipped.
func TestParseSDRefuses(t *testing.T) {
	for data, want := range map[string]string{
		`{"targets": ["a@example.com"]}`: "must be a list of {targets, labels} groups",
		`[{"targets": ["a@example.com"]`: "not valid JSON or YAML",
		"[]":                             addrfile.ErrNoAddress.Error(),
		"\xff":                           "not valid UTF-8",
	} {
		if _, _, err := addrfile.ParseSD("x.json", []byte(data), false, teamOwner); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %v, want %q", data, err, want)
		}
	}
	long := strings.Repeat("x", breach.MaxOwnerLabelBytes+1)
	addrs, invalid, err := addrfile.ParseSD("x.json", []byte(`[{"targets": ["a@example.com"], "labels": {"team": "`+long+`"}}]`), false, teamOwner)
	if err != nil || len(addrs) != 1 || addrs[0].Labels != nil || len(invalid) != 1 || strings.Contains(invalid[0].Reason, long) {
		t.Errorf("a value past %d bytes: %+v %+v %v", breach.MaxOwnerLabelBytes, addrs, invalid, err)
	}
	if !errors.Is(func() error { _, _, err := addrfile.ParseSD("x.json", []byte("[]"), false, nil); return err }(), addrfile.ErrNoAddress) {
		t.Error("an empty list must be ErrNoAddress")
	}
}

// A change of owner_labels parses unchanged files again: a label allowed
// now is kept, one no longer allowed goes.
func TestSDSourceFollowsOwnerLabels(t *testing.T) {
	f := files{t, t.TempDir()}
	f.write("owners.json", `[{"targets": ["a@example.com"], "labels": {"team": "payments", "site": "berlin"}}]`)
	s := addrfile.NewSDSource(nil)
	globs := []string{filepath.Join(f.dir, "*.json")}
	s.Allow(teamOwner)
	if r := s.Read(globs, time.Unix(1000, 0), false); !r.Changed || len(r.Invalid) != 1 {
		t.Fatalf("first read: %+v", r)
	}
	if got := s.Merge(nil)[0].Labels; !slices.Equal(got, []breach.Label{{Name: "team", Value: "payments"}}) {
		t.Errorf("labels %v, want team only", got)
	}
	s.Allow([]string{"team", "site"})
	if r := s.Read(globs, time.Unix(1001, 0), false); !r.Changed {
		t.Fatal("a change of owner_labels is no change")
	}
	if got := s.Merge(nil)[0].Labels; !slices.Equal(got, []breach.Label{{Name: "site", Value: "berlin"}, {Name: "team", Value: "payments"}}) {
		t.Errorf("labels %v, want site and team", got)
	}
	if r := s.Read(globs, time.Unix(1002, 0), false); r.Changed {
		t.Error("the same file and owner_labels again is a change")
	}
}

// The labels of an addresses_files glob are those of every address of
// the files it matches; a change of them is a change.
func TestGlobLabels(t *testing.T) {
	f := files{t, t.TempDir()}
	f.write("hr.txt", "alice@example.com\n")
	f.write("it.yaml", "- bob@example.com\n")
	txt, yml := filepath.Join(f.dir, "*.txt"), filepath.Join(f.dir, "*.yaml")
	s := addrfile.NewSource(nil)
	hr := []breach.Label{{Name: "team", Value: "hr"}}
	s.SetLabels(map[string][]breach.Label{txt: hr})
	if r := s.Read([]string{txt, yml}, time.Unix(1000, 0), false); !r.Changed {
		t.Fatal("first read: no change")
	}
	want := []breach.Address{{Email: "alice@example.com", Labels: hr}, {Email: "bob@example.com"}}
	if got := s.Merge(nil); !slices.EqualFunc(got, want, breach.Address.Equal) {
		t.Errorf("merged %+v, want %+v", got, want)
	}
	s.SetLabels(map[string][]breach.Label{yml: hr})
	if r := s.Read([]string{txt, yml}, time.Unix(1001, 0), false); !r.Changed {
		t.Fatal("the glob labels moved: no change")
	}
	want = []breach.Address{{Email: "alice@example.com"}, {Email: "bob@example.com", Labels: hr}}
	if got := s.Merge(nil); !slices.EqualFunc(got, want, breach.Address.Equal) {
		t.Errorf("merged %+v, want %+v", got, want)
	}
}
