// SPDX-License-Identifier: Apache-2.0

// Package examples holds deployment examples only; this test checks that
// their files parse and agree with each other, since neither Docker nor
// Kubernetes is available to run them in CI.
package examples

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/breach-exporter/breach_exporter/alerts"
	"github.com/breach-exporter/breach_exporter/internal/config"
)

func readYAML(t *testing.T, name string, v interface{}) {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func mustExist(t *testing.T, what, name string) {
	t.Helper()
	if _, err := os.Stat(name); err != nil {
		t.Errorf("%s: %v", what, err)
	}
}

type exporterConfig struct {
	API struct {
		BaseURL   string `yaml:"base_url"`
		TokenFile string `yaml:"token_file"`
	} `yaml:"api"`
	Webhook struct {
		SecretFiles []string `yaml:"secret_files"`
	} `yaml:"webhook"`
	Store *struct {
		PasswordFile string `yaml:"password_file"`
	} `yaml:"store"`
}

func (c exporterConfig) secretFiles() []string {
	files := append([]string{c.API.TokenFile}, c.Webhook.SecretFiles...)
	if c.Store != nil && c.Store.PasswordFile != "" {
		files = append(files, c.Store.PasswordFile)
	}
	return files
}

// The compose files and the exporter config each mounts.
var composeFiles = []struct {
	file, config string
	services     []string
}{
	{"compose.yaml", "breach_exporter.yml", []string{"simulator", "breach_exporter", "prometheus", "alertmanager", "grafana"}},
	{"compose-replicas.yaml", "breach_exporter_replicas.yml", []string{"simulator", "valkey", "breach_exporter_1", "breach_exporter_2", "breach_exporter_3"}},
}

type composeFile struct {
	Services map[string]struct {
		Image string `yaml:"image"`
		Build *struct {
			Context string `yaml:"context"`
			Target  string `yaml:"target"`
		} `yaml:"build"`
		NetworkMode string        `yaml:"network_mode"`
		Command     []string      `yaml:"command"`
		Volumes     []string      `yaml:"volumes"`
		Secrets     []interface{} `yaml:"secrets"`
	} `yaml:"services"`
	Secrets map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
	Volumes map[string]interface{} `yaml:"volumes"`
}

func TestDemoConfigUsesTheDemoSecrets(t *testing.T) {
	for _, c := range composeFiles {
		t.Run(c.config, func(t *testing.T) { checkDemoConfig(t, c.config) })
	}
}

// The demo configs pass what --config.check runs (the secret files read,
// the store section checked), without a warning.
func TestDemoConfigsLoad(t *testing.T) {
	for _, c := range composeFiles {
		b, err := config.LoadBundle(c.config, config.LoadOptions{Webhook: true})
		if err != nil {
			t.Errorf("%s: %v", c.config, err)
		} else if len(b.Warnings) > 0 {
			t.Errorf("%s warns: %q", c.config, b.Warnings)
		}
	}
}

func checkDemoConfig(t *testing.T, file string) {
	var cfg exporterConfig
	readYAML(t, file, &cfg)
	if !strings.HasPrefix(cfg.API.BaseURL, "http://127.0.0.1:") {
		t.Errorf("api.base_url %q: the demo talks to the simulator on loopback", cfg.API.BaseURL)
	}
	for _, f := range cfg.secretFiles() {
		if !strings.HasPrefix(f, "demo-secrets/DEMO_ONLY_") {
			t.Errorf("%s: the demo must use the demo-only files", f)
		}
		mustExist(t, file, f)
	}
	token, err := os.ReadFile(cfg.API.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(token, []byte("svc_ak_")) {
		t.Error("the demo token lacks the svc_ak_ form the exporter requires")
	}
}

func TestCompose(t *testing.T) {
	for _, f := range composeFiles {
		t.Run(f.file, func(t *testing.T) { checkCompose(t, f.file, f.config, f.services) })
	}
}

// checkCompose checks that the services of file are built or pinned, that
// what they mount exists, and that the exporter config it mounts finds its
// secret files (and Prometheus and Grafana theirs, where file has them).
func checkCompose(t *testing.T, file, config string, services []string) {
	var c composeFile
	readYAML(t, file, &c)
	var cfg exporterConfig
	readYAML(t, config, &cfg)
	stages := dockerfileStages(t)

	for _, name := range services {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("%s: no service %s", file, name)
		}
	}
	mounts := map[string]string{} // container path -> host path, across services
	for name, s := range c.Services {
		if s.NetworkMode != "host" {
			t.Errorf("%s: network_mode %q; the shared 127.0.0.1 configuration needs host", name, s.NetworkMode)
		}
		if s.Build != nil {
			mustExist(t, name+": build context", s.Build.Context)
			if !stages[s.Build.Target] {
				t.Errorf("%s: build target %q is no stage of the Dockerfile", name, s.Build.Target)
			}
		} else if tag := s.Image[strings.LastIndex(s.Image, ":")+1:]; !strings.HasPrefix(tag, "v") && !regexp.MustCompile(`^\d`).MatchString(tag) {
			t.Errorf("%s: image %q is not pinned to a version", name, s.Image)
		}
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if strings.HasPrefix(parts[0], ".") {
				mustExist(t, name+": volume", parts[0])
				mounts[parts[1]] = parts[0]
			} else if _, ok := c.Volumes[parts[0]]; !ok {
				t.Errorf("%s: volume %s is not declared", name, parts[0])
			}
		}
		for _, sec := range s.Secrets {
			source, target := secretRef(sec)
			if _, ok := c.Secrets[source]; !ok {
				t.Errorf("%s: secret %s is not declared", name, source)
			}
			mounts[target] = c.Secrets[source].File
		}
	}
	for name, s := range c.Secrets {
		mustExist(t, "secret "+name, s.File)
	}

	// The exporter resolves breach_exporter.yml's relative paths next to the
	// mounted file; each must be a mounted secret.
	cfgDir := ""
	for target, host := range mounts {
		if host == "./"+config {
			cfgDir = path.Dir(target)
		}
	}
	if cfgDir == "" {
		t.Fatalf("%s does not mount %s", file, config)
	}
	for _, f := range cfg.secretFiles() {
		if _, ok := mounts[path.Join(cfgDir, f)]; !ok {
			t.Errorf("%s names %s, which %s does not mount at %s", config, f, file, path.Join(cfgDir, f))
		}
	}
	if _, ok := c.Services["grafana"]; !ok {
		return
	}
	// prometheus.yml's relative rule_files must resolve in the container too.
	var prom struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	readYAML(t, "prometheus.yml", &prom)
	for target, host := range mounts {
		if host != "./prometheus.yml" {
			continue
		}
		for _, rf := range prom.RuleFiles {
			mustExist(t, "prometheus.yml rule_files", rf)
			if _, ok := mounts[path.Join(path.Dir(target), rf)]; !ok {
				t.Errorf("prometheus.yml loads %s, which %s does not mount", rf, file)
			}
		}
	}
	// Grafana's dashboard provider reads where compose mounts dashboards/.
	var providers struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, "grafana/provisioning/dashboards/breach_exporter.yml", &providers)
	if len(providers.Providers) != 1 || mounts[providers.Providers[0].Options.Path] != "../dashboards" {
		t.Errorf("the Grafana dashboard provider does not read the mounted ../dashboards: %+v", providers)
	}
}

func secretRef(s interface{}) (source, target string) {
	switch s := s.(type) {
	case string:
		return s, "/run/secrets/" + s
	case map[string]interface{}:
		source, _ = s["source"].(string)
		target, _ = s["target"].(string)
		if !strings.HasPrefix(target, "/") {
			target = "/run/secrets/" + target
		}
	}
	return source, target
}

func dockerfileStages(t *testing.T) map[string]bool {
	t.Helper()
	data, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?mi)^FROM\s.+\sAS\s+(\S+)\s*$`).FindAllStringSubmatch(string(data), -1) {
		stages[m[1]] = true
	}
	return stages
}

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name   string            `yaml:"name"`
		Labels map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		// matchLabels in a Deployment or ServiceMonitor, the labels themselves in a Service.
		Selector map[string]interface{} `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
		Endpoints []struct {
			Port string `yaml:"port"`
		} `yaml:"endpoints"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []struct {
					Args  []string `yaml:"args"`
					Ports []struct {
						Name string `yaml:"name"`
					} `yaml:"ports"`
					VolumeMounts []struct {
						Name      string `yaml:"name"`
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
					Secret *struct {
						SecretName string `yaml:"secretName"`
					} `yaml:"secret"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func kubernetesObjects(t *testing.T) map[string][]k8sObject {
	t.Helper()
	files, err := filepath.Glob("kubernetes/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	byKind := map[string][]k8sObject{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var o k8sObject
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s: object without apiVersion, kind or name", f)
			}
			byKind[o.Kind] = append(byKind[o.Kind], o)
		}
	}
	return byKind
}

func TestKubernetesManifestsAgree(t *testing.T) {
	var kustomization struct {
		Resources []string `yaml:"resources"`
	}
	readYAML(t, "kubernetes/kustomization.yaml", &kustomization)
	files, _ := filepath.Glob("kubernetes/*.yaml")
	if len(kustomization.Resources) != len(files)-1 {
		t.Errorf("kustomization.yaml lists %v, the folder has %v", kustomization.Resources, files)
	}
	for _, r := range kustomization.Resources {
		mustExist(t, "kustomization.yaml", filepath.Join("kubernetes", r))
	}

	objs := kubernetesObjects(t)
	for _, kind := range []string{"ConfigMap", "Deployment", "Service", "ServiceMonitor", "PrometheusRule"} {
		if len(objs[kind]) == 0 {
			t.Fatalf("no %s", kind)
		}
	}
	dep := objs["Deployment"][0]
	pod := dep.Spec.Template.Spec
	podLabels := dep.Spec.Template.Metadata.Labels
	if !subset(labels(dep.Spec.Selector["matchLabels"]), podLabels) {
		t.Error("the Deployment's selector does not match its pods")
	}
	mountOf := map[string]string{}
	for _, m := range pod.Containers[0].VolumeMounts {
		mountOf[m.Name] = m.MountPath
	}
	var configDir, secretDir string
	for _, v := range pod.Volumes {
		switch {
		case v.ConfigMap != nil:
			if v.ConfigMap.Name != objs["ConfigMap"][0].Metadata.Name {
				t.Errorf("volume %s uses ConfigMap %s, which is not in the manifests", v.Name, v.ConfigMap.Name)
			}
			configDir = mountOf[v.Name]
		case v.Secret != nil:
			secretDir = mountOf[v.Name]
		}
	}
	var configFile string
	for _, a := range pod.Containers[0].Args {
		if f, ok := strings.CutPrefix(a, "--config.file="); ok {
			configFile = f
		}
	}
	if configDir == "" || path.Dir(configFile) != configDir {
		t.Fatalf("--config.file=%s is not in the mounted ConfigMap (%s)", configFile, configDir)
	}
	var cfg exporterConfig
	if err := yaml.Unmarshal([]byte(objs["ConfigMap"][0].Data[path.Base(configFile)]), &cfg); err != nil || cfg.API.TokenFile == "" {
		t.Fatalf("the ConfigMap has no configuration %s: %v", path.Base(configFile), err)
	}
	for _, f := range cfg.secretFiles() {
		if secretDir == "" || path.Dir(f) != secretDir {
			t.Errorf("the configuration reads %s, outside the mounted Secret (%s)", f, secretDir)
		}
	}

	containerPorts := map[string]bool{}
	for _, p := range pod.Containers[0].Ports {
		containerPorts[p.Name] = true
	}
	for _, sm := range objs["ServiceMonitor"] {
		matched := 0
		for _, svc := range objs["Service"] {
			if !subset(labels(sm.Spec.Selector["matchLabels"]), svc.Metadata.Labels) {
				continue
			}
			matched++
			for _, ep := range sm.Spec.Endpoints {
				if !hasPort(svc, ep.Port) {
					t.Errorf("ServiceMonitor port %s is not a port of Service %s", ep.Port, svc.Metadata.Name)
				}
			}
		}
		if matched != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want the metrics one only", sm.Metadata.Name, matched)
		}
	}
	for _, svc := range objs["Service"] {
		if !subset(labels(svc.Spec.Selector), podLabels) {
			t.Errorf("Service %s does not select the Deployment's pods", svc.Metadata.Name)
		}
		for _, p := range svc.Spec.Ports {
			if !containerPorts[p.TargetPort] {
				t.Errorf("Service %s targets port %s, which the container does not name", svc.Metadata.Name, p.TargetPort)
			}
		}
	}
}

func labels(v interface{}) map[string]string {
	out := map[string]string{}
	switch m := v.(type) {
	case map[string]interface{}:
		for k, v := range m {
			out[k], _ = v.(string)
		}
	}
	return out
}

func subset(sub, set map[string]string) bool {
	if len(sub) == 0 {
		return false
	}
	for k, v := range sub {
		if set[k] != v {
			return false
		}
	}
	return true
}

func hasPort(svc k8sObject, name string) bool {
	for _, p := range svc.Spec.Ports {
		if p.Name == name {
			return true
		}
	}
	return false
}

// Debian 12's docker-compose 1.29 rejects top-level keys newer than its
// schema (name:, include:): compose.yaml keeps to the ones it knows.
func TestComposeTopLevelKeysSuitDockerCompose1(t *testing.T) {
	for _, f := range composeFiles {
		var top map[string]interface{}
		readYAML(t, f.file, &top)
		for key := range top {
			switch key {
			case "services", "secrets", "volumes", "networks", "configs":
			default:
				t.Errorf("%s: top-level key %q is unknown to docker-compose 1.29", f.file, key)
			}
		}
	}
}

// Every receiver of the example Alertmanager posts to the simulator's
// notification sink, which make demo and compose run.
func TestAlertmanagerReceiversReachTheSink(t *testing.T) {
	var am struct {
		Receivers []struct {
			Name           string `yaml:"name"`
			WebhookConfigs []struct {
				URL string `yaml:"url"`
			} `yaml:"webhook_configs"`
			EmailConfigs []interface{} `yaml:"email_configs"`
		} `yaml:"receivers"`
	}
	readYAML(t, "alertmanager.yml", &am)
	if len(am.Receivers) == 0 {
		t.Fatal("alertmanager.yml: no receivers")
	}
	for _, r := range am.Receivers {
		if len(r.EmailConfigs) > 0 {
			t.Errorf("receiver %s mails: nothing in the demo receives mail, so every one would fail", r.Name)
		}
		if len(r.WebhookConfigs) == 0 {
			t.Errorf("receiver %s has no webhook", r.Name)
		}
		for _, w := range r.WebhookConfigs {
			if want := "http://127.0.0.1:8099/notifications/" + r.Name; w.URL != want {
				t.Errorf("receiver %s posts to %s, want the simulator's sink %s", r.Name, w.URL, want)
			}
		}
	}
}

// Alertmanager sends no resolution for an alert inhibited when it resolves
// (prometheus/alertmanager#2754), so an inhibit rule that matched alerts by
// severity alone would swallow the resolution of any page of that severity
// notified before its source fired. Every rule names its targets, and
// every name is an alert of the rules file.
func TestAlertmanagerInhibitsOnlyNamedAlerts(t *testing.T) {
	var am struct {
		InhibitRules []struct {
			TargetMatchers []string `yaml:"target_matchers"`
		} `yaml:"inhibit_rules"`
	}
	readYAML(t, "alertmanager.yml", &am)
	rules, err := alerts.Rules()
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, r := range rules {
		known[r.Alert] = true
	}
	byName := regexp.MustCompile(`^alertname=~?"([A-Za-z|]+)"$`)
	for i, r := range am.InhibitRules {
		named := 0
		for _, m := range r.TargetMatchers {
			found := byName.FindStringSubmatch(m)
			if found == nil {
				continue
			}
			named++
			for _, name := range strings.Split(found[1], "|") {
				if !known[name] {
					t.Errorf("inhibit rule %d targets %s, which is not an alert of the rules file", i, name)
				}
			}
		}
		if named == 0 {
			t.Errorf("inhibit rule %d targets %v: name the alerts it holds back (alertname=\"...\" or =~\"A|B\")", i, r.TargetMatchers)
		}
	}
}

// amtool accepts the example Alertmanager config where it is installed
// (make e2e installs Debian's prometheus-alertmanager, which has it).
func TestAlertmanagerConfigPassesAmtool(t *testing.T) {
	amtool, err := exec.LookPath("amtool")
	if err != nil {
		t.Skip("amtool not installed (Debian's prometheus-alertmanager has it)")
	}
	if out, err := exec.Command(amtool, "check-config", "alertmanager.yml").CombinedOutput(); err != nil {
		t.Errorf("amtool check-config alertmanager.yml: %v\n%s", err, out)
	}
}

// Every deployment example sets the same GOMEMLIMIT and memory limit, the
// soft limit below the hard one with room for what the Go runtime does not
// count (stacks of idle goroutines are counted, but not the kernel's socket
// buffers or the binary's own pages): at least a tenth of the hard limit.
func TestGOMEMLIMITIsBelowTheMemoryLimits(t *testing.T) {
	deployment := readDeployment(t)
	var compose struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			MemLimit    string            `yaml:"mem_limit"`
		} `yaml:"services"`
	}
	readYAML(t, "compose.yaml", &compose)
	unit, err := os.ReadFile("breach_exporter.service")
	if err != nil {
		t.Fatal(err)
	}

	type limits struct {
		soft, hard string
		units      map[string]uint // of hard
	}
	goUnits := map[string]uint{"B": 0, "KiB": 10, "MiB": 20, "GiB": 30}
	found := map[string]limits{}
	for _, c := range deployment.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				found["kubernetes/deployment.yaml"] = limits{e.Value, c.Resources.Limits["memory"], map[string]uint{"Ki": 10, "Mi": 20, "Gi": 30}}
			}
		}
	}
	exporter := compose.Services["breach_exporter"]
	found["compose.yaml"] = limits{exporter.Environment["GOMEMLIMIT"], exporter.MemLimit, map[string]uint{"k": 10, "m": 20, "g": 30}}
	soft := regexp.MustCompile(`(?m)^Environment=GOMEMLIMIT=(\S+)$`).FindSubmatch(unit)
	hard := regexp.MustCompile(`(?m)^MemoryMax=(\S+)$`).FindSubmatch(unit)
	if soft != nil && hard != nil {
		found["breach_exporter.service"] = limits{string(soft[1]), string(hard[1]), map[string]uint{"K": 10, "M": 20, "G": 30}}
	}

	var first *[2]int64
	for _, file := range []string{"kubernetes/deployment.yaml", "compose.yaml", "breach_exporter.service"} {
		l, ok := found[file]
		if !ok {
			t.Errorf("%s: no GOMEMLIMIT and memory limit", file)
			continue
		}
		s, errS := bytesOf(l.soft, goUnits)
		h, errH := bytesOf(l.hard, l.units)
		if errS != nil || errH != nil {
			t.Errorf("%s: GOMEMLIMIT %q (%v), memory limit %q (%v)", file, l.soft, errS, l.hard, errH)
			continue
		}
		if s > h-h/10 {
			t.Errorf("%s: GOMEMLIMIT %s is not at least a tenth below the memory limit %s", file, l.soft, l.hard)
		}
		if first == nil {
			first = &[2]int64{s, h}
		} else if *first != [2]int64{s, h} {
			t.Errorf("%s: GOMEMLIMIT %s and limit %s differ from kubernetes/deployment.yaml's", file, l.soft, l.hard)
		}
	}
}

// bytesOf parses a number followed by one of units, each the power of two
// it stands for: the files' units differ (Kubernetes' M is 10^6, systemd's
// 2^20), so each file names its own.
func bytesOf(s string, units map[string]uint) (int64, error) {
	m := regexp.MustCompile(`^(\d+)([A-Za-z]*)$`).FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("%q is not a number and a unit", s)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, err
	}
	shift, ok := units[m[2]]
	if !ok {
		return 0, fmt.Errorf("%q: unit %q is not one of %v", s, m[2], units)
	}
	return n << shift, nil
}
