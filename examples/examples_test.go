// Package examples holds deployment examples only; this test checks that
// their files parse and agree with each other, since neither Docker nor
// Kubernetes is available to run them in CI.
package examples

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v2"
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
}

func (c exporterConfig) secretFiles() []string {
	return append([]string{c.API.TokenFile}, c.Webhook.SecretFiles...)
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
	var cfg exporterConfig
	readYAML(t, "breach_exporter.yml", &cfg)
	if !strings.HasPrefix(cfg.API.BaseURL, "http://127.0.0.1:") {
		t.Errorf("api.base_url %q: the demo talks to the simulator on loopback", cfg.API.BaseURL)
	}
	for _, f := range cfg.secretFiles() {
		if !strings.HasPrefix(f, "demo-secrets/DEMO_ONLY_") {
			t.Errorf("%s: the demo must use the demo-only files", f)
		}
		mustExist(t, "breach_exporter.yml", f)
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
	var c composeFile
	readYAML(t, "compose.yaml", &c)
	var cfg exporterConfig
	readYAML(t, "breach_exporter.yml", &cfg)
	stages := dockerfileStages(t)

	for _, name := range []string{"simulator", "breach_exporter", "prometheus", "alertmanager", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("compose.yaml: no service %s", name)
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
		if host == "./breach_exporter.yml" {
			cfgDir = path.Dir(target)
		}
	}
	if cfgDir == "" {
		t.Fatal("compose.yaml does not mount breach_exporter.yml")
	}
	for _, f := range cfg.secretFiles() {
		if _, ok := mounts[path.Join(cfgDir, f)]; !ok {
			t.Errorf("breach_exporter.yml names %s, which compose.yaml does not mount at %s", f, path.Join(cfgDir, f))
		}
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
				t.Errorf("prometheus.yml loads %s, which compose.yaml does not mount", rf)
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
	case map[interface{}]interface{}:
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
	case map[interface{}]interface{}:
		for k, v := range m {
			key, _ := k.(string)
			out[key], _ = v.(string)
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
