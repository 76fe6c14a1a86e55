// SPDX-License-Identifier: Apache-2.0

package breach

import (
	"maps"
	"regexp"
	"slices"
)

// Label is one owner label of a watched address (team, owner, ...): from
// the config's addresses or an address file in file_sd shape, carried by
// breach_address_info so that alerts can be routed to the owning team.
type Label struct {
	Name, Value string
}

// Owner label bounds: every name is a label on breach_address_info, so the
// set of names is the config's (owner_labels, at most MaxOwnerLabelNames),
// and every value is at most MaxOwnerLabelBytes (a team or a person's
// handle, not a document).
const (
	MaxOwnerLabelNames = 8
	MaxOwnerLabelBytes = 128
)

// labelName is Prometheus' rule for a label name; names starting with __
// are Prometheus' own.
var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// ValidLabelName reports whether s may name an owner label: a Prometheus
// label name, not reserved (__), and not one the per-address series
// already carry.
func ValidLabelName(s string) bool {
	return labelName.MatchString(s) && !(len(s) >= 2 && s[:2] == "__") && s != "address" && s != "account"
}

// OwnerLabels returns m as labels in name order (nil for none).
func OwnerLabels(m map[string]string) []Label {
	if len(m) == 0 {
		return nil
	}
	out := make([]Label, 0, len(m))
	for _, name := range slices.Sorted(maps.Keys(m)) {
		out = append(out, Label{Name: name, Value: m[name]})
	}
	return out
}

// OwnerValue is the exported value of an owner label under mode: a value
// that is an email address is labelled as the address label would label
// that address (so no clear address outside labels.address email), any
// other is cut to MaxOwnerLabelBytes.
func OwnerValue(mode Labeler, v string) string {
	if ValidEmail(v) {
		return mode.Label(Address{Email: v})
	}
	return LabelValue(v, MaxOwnerLabelBytes)
}

// Equal reports whether a and b are the same address with the same owner
// labels.
func (a Address) Equal(b Address) bool {
	return a.Email == b.Email && a.Alias == b.Alias && a.Discovered == b.Discovered &&
		a.Account == b.Account && slices.Equal(a.Labels, b.Labels)
}
