// SPDX-License-Identifier: Apache-2.0

package examples

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/internal/config"
)

var semver = regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)

// version is the release's version, from the repository's VERSION file.
func version(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile("../VERSION")
	if err != nil {
		t.Fatal(err)
	}
	v := strings.TrimSuffix(string(data), "\n")
	if !semver.MatchString(v) {
		t.Fatalf("VERSION %q is not one line of semantic version (X.Y.Z)", data)
	}
	return v
}

// Everything that names the release names the same version: the Makefile
// reads it, the chart's version and appVersion are it, and the image tag
// v<VERSION> is what the chart, the kustomization and the docs run.
func TestEverythingNamesTheVersion(t *testing.T) {
	v := version(t)
	tag := "v" + v

	makefile, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^VERSION\s*\?=\s*\$\(shell cat VERSION\)$`).Match(makefile) ||
		!regexp.MustCompile(`(?m)^IMAGE_TAG\s*\?=\s*v\$\(VERSION\)$`).Match(makefile) {
		t.Error("the Makefile does not take VERSION from the VERSION file, or does not tag the image v$(VERSION)")
	}

	var chart struct {
		Version    string `yaml:"version"`
		AppVersion string `yaml:"appVersion"`
	}
	readYAML(t, "../charts/breach-exporter/Chart.yaml", &chart)
	if chart.Version != v || chart.AppVersion != v {
		t.Errorf("Chart.yaml: version %q, appVersion %q; want %s", chart.Version, chart.AppVersion, v)
	}
	var values struct {
		Image struct {
			Tag string `yaml:"tag"`
		} `yaml:"image"`
	}
	readYAML(t, "../charts/breach-exporter/values.yaml", &values)
	if values.Image.Tag != "" && values.Image.Tag != tag {
		t.Errorf("the chart's image.tag is %q: leave it empty (v<appVersion>) or make it %s", values.Image.Tag, tag)
	}

	const repo = "ghcr.io/breach-exporter/breach_exporter"
	image := regexp.MustCompile(regexp.QuoteMeta(repo) + `:(v[0-9][^\s"'` + "`" + `]*)`)
	// The deployment names the image; the docs may, on any page.
	docs := 0
	for _, file := range append([]string{"kubernetes/deployment.yaml"}, docPages(t)...) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		found := image.FindAllSubmatch(data, -1)
		if file == "kubernetes/deployment.yaml" && len(found) == 0 {
			t.Errorf("%s names no %s:%s image", file, repo, tag)
		} else if file != "kubernetes/deployment.yaml" {
			docs += len(found)
		}
		for _, m := range found {
			if string(m[1]) != tag {
				t.Errorf("%s names %s, want %s:%s", file, m[0], repo, tag)
			}
		}
	}
	if docs == 0 {
		t.Errorf("neither README.md nor docs/ names the %s:%s image", repo, tag)
	}
	var kustomization struct {
		Images []struct {
			Name   string `yaml:"name"`
			NewTag string `yaml:"newTag"`
		} `yaml:"images"`
	}
	readYAML(t, "kubernetes/kustomization.yaml", &kustomization)
	if len(kustomization.Images) != 1 || kustomization.Images[0].NewTag != tag {
		t.Errorf("kustomization.yaml images: %+v, want one with newTag %s", kustomization.Images, tag)
	}

	changelog, err := os.ReadFile("../CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^## ` + regexp.QuoteMeta(v) + ` / \d{4}-\d{2}-\d{2}$`).Match(changelog) {
		t.Errorf("CHANGELOG.md has no section \"## %s / <date>\"", v)
	}
	if !regexp.MustCompile(`(?m)\A(?:.*\n)*?## Unreleased\n(?:.*\n)*?## ` + regexp.QuoteMeta(v) + ` `).Match(changelog) {
		t.Errorf("CHANGELOG.md: want \"## Unreleased\" above the %s section", v)
	}
}

// The example config shipped in the release tarballs is valid.
func TestReleaseExampleConfig(t *testing.T) {
	data, err := os.ReadFile("release/breach_exporter.yml")
	if err != nil {
		t.Fatal(err)
	}
	loadsWithItsSecrets(t, string(data), "")
}

// The kustomization's config is valid; the chart's default config is the
// same file (examples/kubernetes/test checks that), so it is valid too.
func TestKubernetesConfigIsValid(t *testing.T) {
	var cm struct {
		Data map[string]string `yaml:"data"`
	}
	readYAML(t, "kubernetes/configmap.yaml", &cm)
	data, ok := cm.Data["breach_exporter.yml"]
	if !ok {
		t.Fatal("kubernetes/configmap.yaml holds no breach_exporter.yml")
	}
	loadsWithItsSecrets(t, data, "/etc/breach_exporter/secrets/")
}

// loadsWithItsSecrets checks that data is a config the exporter starts
// with (config.LoadBundle, the receiver on), written in a folder of its
// own where the token and secret files it names exist, with the folder
// dir of absolute paths moved there.
func loadsWithItsSecrets(t *testing.T, data, dir string) {
	t.Helper()
	tmp := t.TempDir()
	if dir != "" {
		data = strings.ReplaceAll(data, dir, tmp+"/")
	}
	var cfg exporterConfig
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
		t.Fatal(err)
	}
	for i, f := range cfg.secretFiles() {
		if !filepath.IsAbs(f) {
			f = filepath.Join(tmp, f)
		}
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		content := "svc_ak_example_token" // the token comes first
		if i > 0 {
			content = fmt.Sprintf("example-webhook-secret-%d-0123456789abcdef", i)
		}
		if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(tmp, "breach_exporter.yml")
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadBundle(path, config.LoadOptions{Webhook: true}); err != nil {
		t.Fatal(err)
	}
}
