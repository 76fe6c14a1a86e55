// SPDX-License-Identifier: Apache-2.0

package addrfile

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/internal/breach"
)

// ParseSD returns the addresses of a file in Prometheus' file_sd shape
// (addresses_sd_files), JSON or YAML: a list of groups
// {targets: [addresses], labels: {name: value}}, each address with its
// group's labels. allowed are the label names a group may carry (the
// config's owner_labels). A group, target or label that is not usable is
// an invalid line, skipped: a bad target alone, a bad label alone (the
// group's addresses stay watched without it), a group that is no mapping
// whole. The error is Parse's: the file as a whole is not usable.
func ParseSD(path string, data []byte, show bool, allowed []string) ([]breach.Address, []LineError, error) {
	if !utf8.Valid(data) {
		return nil, nil, errors.New("not valid UTF-8 text")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil { // JSON is YAML
		return nil, nil, fmt.Errorf("not valid JSON or YAML: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	p := &sdParser{path: path, show: show, allowed: allowed}
	if len(doc.Content) > 0 {
		list := doc.Content[0]
		if list.Kind != yaml.SequenceNode {
			return nil, nil, fmt.Errorf("line %d: must be a list of {targets, labels} groups", list.Line)
		}
		for _, group := range list.Content {
			p.group(group)
		}
	}
	if len(p.addrs) == 0 {
		return nil, p.invalid, ErrNoAddress
	}
	return p.addrs, p.invalid, nil
}

type sdParser struct {
	path    string
	show    bool
	allowed []string
	addrs   []breach.Address
	invalid []LineError
}

func (p *sdParser) skip(line int, reason string) {
	p.invalid = append(p.invalid, LineError{File: p.path, Line: line, Reason: reason})
}

// group adds the targets of one group with its labels.
func (p *sdParser) group(n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.skip(n.Line, "not a group: must be a mapping with targets and labels")
		return
	}
	var targets, labels *yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch k, v := n.Content[i], n.Content[i+1]; k.Value {
		case "targets":
			targets = v
		case "labels":
			labels = v
		default:
			p.skip(k.Line, fmt.Sprintf("unknown key %s: a group has targets and labels", p.name(k.Value)))
		}
	}
	if targets == nil || targets.Kind != yaml.SequenceNode {
		p.skip(n.Line, "a group needs targets: a list of addresses")
		return
	}
	owner := p.labels(labels)
	for _, t := range targets.Content {
		p.target(t, owner)
	}
}

// labels returns the usable labels of a group's labels mapping, in name
// order.
func (p *sdParser) labels(n *yaml.Node) []breach.Label {
	if n == nil || n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.skip(n.Line, "labels must be a mapping of label names to values")
		return nil
	}
	m := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if reason := labelProblem(p.name(k.Value), k.Value, v, p.allowed); reason != "" {
			p.skip(k.Line, reason)
			continue
		}
		m[k.Value] = v.Value
	}
	return breach.OwnerLabels(m)
}

// name is how an error shows a key of the file: quoted and cut, and not
// at all where it is an address and addresses are not shown.
func (p *sdParser) name(key string) string {
	if !p.show && breach.ValidEmail(key) {
		return "(an address)"
	}
	return strconv.Quote(breach.LabelValue(key, 64))
}

// labelProblem says why the label name (shown as shown) is not usable; ""
// if it is.
func labelProblem(shown, name string, v *yaml.Node, allowed []string) string {
	switch {
	case !slices.Contains(allowed, name):
		return fmt.Sprintf("label %s is not one of owner_labels (%s)", shown, strings.Join(allowed, ", "))
	case v.Kind != yaml.ScalarNode || v.Tag != "!!str":
		return fmt.Sprintf("label %s: the value must be a string", shown)
	case len(v.Value) > breach.MaxOwnerLabelBytes:
		return fmt.Sprintf("label %s: the value is longer than %d bytes", shown, breach.MaxOwnerLabelBytes)
	}
	return ""
}

// target adds one address of a group.
func (p *sdParser) target(n *yaml.Node, owner []breach.Label) {
	text := strings.TrimSpace(n.Value)
	switch {
	case n.Kind != yaml.ScalarNode || n.Tag != "!!str":
		p.skip(n.Line, "not an address: must be a string")
	case breach.ValidEmail(text):
		p.addrs = append(p.addrs, breach.Address{Email: text, Labels: owner})
	case p.show:
		p.skip(n.Line, strconv.Quote(text)+" is not a valid email address")
	default:
		p.skip(n.Line, "not a valid email address")
	}
}
