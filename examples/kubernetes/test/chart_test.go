// SPDX-License-Identifier: Apache-2.0

package test

// The Helm chart, rendered by the helm binary (`make kubernetes-test` builds
// a pinned one and passes it in HELM) with its defaults and with every
// ci/*-values.yaml, decoded as strictly as the kustomization, and compared
// with the kustomization: the same image, config, secret files, rules and
// security context.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const chartDir = "../../../charts/breach-exporter"

func helm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		t.Fatal("no helm: run `make kubernetes-test`, which builds a pinned one, or set HELM")
	}
	return h
}

// render runs helm template as release breach-exporter in the monitoring
// namespace and decodes every object strictly.
func render(t *testing.T, args ...string) objects {
	t.Helper()
	cmd := exec.Command(helm(t), append([]string{"template", "breach-exporter", chartDir, "--namespace", monitoring}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template %v: %v\n%s", args, err, stderr.String())
	}
	var objs objects
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			t.Fatal(err)
		}
		if meta.Kind == "" {
			continue // a document of comments only
		}
		id := fmt.Sprintf("%s %s/%s", meta.Kind, meta.Metadata.Namespace, meta.Metadata.Name)
		if meta.Metadata.Namespace != monitoring {
			t.Errorf("%s: not in the release's namespace", id)
		}
		objs.add(t, id, meta.APIVersion, meta.Kind, doc)
	}
	return objs
}

func TestChartValues(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(chartDir, "ci", "*-values.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci/*-values.yaml: %v", err)
	}
	cases := map[string]string{"defaults": ""}
	for _, f := range files {
		cases[filepath.Base(f)] = f
	}
	for name, file := range cases {
		t.Run(name, func(t *testing.T) {
			var args []string
			if file != "" {
				args = []string{"-f", file}
			}
			objs := render(t, args...)
			if len(objs.deployments) != 1 {
				t.Fatalf("want one Deployment among %d objects, got %d", objs.count, len(objs.deployments))
			}
			dep := objs.deployments[0]
			pod := dep.Spec.Template.Spec
			cfg := configFile(t, objs)
			if _, shared := cfg["store"]; shared && *dep.Spec.Replicas > 1 {
				checkReplicated(t, objs, dep)
			} else if *dep.Spec.Replicas != 1 {
				t.Errorf("%d replicas without a store: the API key's budget is for one exporter", *dep.Spec.Replicas)
			}
			for _, c := range pod.Containers {
				if !strings.Contains(c.Image, "@sha256:") {
					checkImage(t, c.Name, c.Image)
				}
				checkRestricted(t, pod.SecurityContext, c)
			}
			checkVolumes(t, objs, pod, existingObjects(t, file))
			checkConfigFilesMounted(t, cfg, pod.Containers[0].VolumeMounts)
			for _, sm := range objs.serviceMonitors {
				selected := 0
				for _, svc := range objs.services {
					if subset(sm.Spec.Selector.MatchLabels, svc.Labels) {
						selected++
					}
				}
				if selected != 1 {
					t.Errorf("ServiceMonitor %s selects %d Services, want 1", sm.Name, selected)
				}
			}
			for _, ing := range objs.ingresses {
				for _, rule := range ing.Spec.Rules {
					for _, p := range rule.HTTP.Paths {
						svc := p.Backend.Service
						if svc == nil || !hasServicePort(objs, svc.Name, svc.Port.Name) {
							t.Errorf("Ingress %s: path %s has no backend Service port among the chart's", ing.Name, p.Path)
						}
					}
				}
			}
		})
	}
}

// The full values admit what the kustomization's NetworkPolicy admits.
func TestChartNetworkPolicy(t *testing.T) {
	objs := render(t, "-f", filepath.Join(chartDir, "ci", "full-values.yaml"))
	if len(objs.policies) != 1 || len(objs.deployments) != 1 {
		t.Fatalf("%d NetworkPolicies, %d Deployments", len(objs.policies), len(objs.deployments))
	}
	checkNetworkPolicy(t, objs.policies[0], objs.deployments[0].Spec.Template)
}

// The chart installs what the kustomization installs: the same image,
// arguments, config file, secret keys, security context and rules.
func TestChartMatchesKustomization(t *testing.T) {
	chart := render(t, "--set", "serviceMonitor.enabled=true,prometheusRule.enabled=true")
	kust := build(t, filesys.MakeFsOnDisk(), "..")
	if len(chart.deployments) != 1 || len(kust.deployments) != 1 {
		t.Fatalf("%d and %d Deployments", len(chart.deployments), len(kust.deployments))
	}
	cPod, kPod := chart.deployments[0].Spec.Template.Spec, kust.deployments[0].Spec.Template.Spec
	cc, kc := cPod.Containers[0], kPod.Containers[0]
	if cc.Image != kc.Image {
		t.Errorf("image: chart %s, kustomization %s", cc.Image, kc.Image)
	}
	for _, arg := range kc.Args {
		if !slices.Contains(cc.Args, arg) {
			t.Errorf("the chart's container lacks the kustomization's argument %s: %v", arg, cc.Args)
		}
	}
	if !reflect.DeepEqual(cc.SecurityContext, kc.SecurityContext) {
		t.Errorf("container securityContext: chart %+v, kustomization %+v", cc.SecurityContext, kc.SecurityContext)
	}
	if !reflect.DeepEqual(cPod.SecurityContext, kPod.SecurityContext) {
		t.Errorf("pod securityContext: chart %+v, kustomization %+v", cPod.SecurityContext, kPod.SecurityContext)
	}
	if c, k := configFile(t, chart), configFile(t, kust); !reflect.DeepEqual(c, k) {
		t.Errorf("config file:\nchart         %v\nkustomization %v", c, k)
	}
	if len(chart.rules) != 1 || len(kust.rules) != 1 {
		t.Fatalf("%d and %d PrometheusRules", len(chart.rules), len(kust.rules))
	}
	if !reflect.DeepEqual(chart.rules[0].Spec, kust.rules[0].Spec) {
		t.Error("the chart's PrometheusRule differs from the kustomization's: run `make generate`")
	}
	if len(chart.serviceMonitors) != 1 || len(kust.serviceMonitors) != 1 {
		t.Fatalf("%d and %d ServiceMonitors", len(chart.serviceMonitors), len(kust.serviceMonitors))
	}
	if c, k := chart.serviceMonitors[0].Spec.Endpoints[0].RelabelConfigs, kust.serviceMonitors[0].Spec.Endpoints[0].RelabelConfigs; !reflect.DeepEqual(c, k) {
		t.Errorf("ServiceMonitor relabelings: chart %+v, kustomization %+v", c, k)
	}
}

// A config change changes the pod template, so the pod rolls.
func TestChartConfigChangeRollsThePod(t *testing.T) {
	annotation := func(args ...string) string {
		objs := render(t, args...)
		if len(objs.deployments) != 1 {
			t.Fatalf("%d Deployments", len(objs.deployments))
		}
		return objs.deployments[0].Spec.Template.Annotations["checksum/config"]
	}
	base := annotation()
	if base == "" || annotation() != base {
		t.Fatalf("checksum/config %q is missing or unstable", base)
	}
	if annotation("--set", "config.refresh.interval=30m") == base {
		t.Error("a config change leaves the pod template as it is")
	}
}

func configFile(t *testing.T, objs objects) map[string]any {
	t.Helper()
	if len(objs.configMaps) < 1 {
		t.Fatal("no ConfigMap")
	}
	for _, cm := range objs.configMaps {
		if data, ok := cm.Data["breach_exporter.yml"]; ok {
			var cfg map[string]any
			if err := yaml.UnmarshalStrict([]byte(data), &cfg); err != nil {
				t.Fatalf("ConfigMap %s: %v", cm.Name, err)
			}
			return cfg
		}
	}
	t.Fatal("no ConfigMap holds breach_exporter.yml")
	return nil
}

// checkRestricted: the "restricted" Pod Security Standard.
func checkRestricted(t *testing.T, pod *corev1.PodSecurityContext, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	switch {
	case pod == nil || pod.RunAsNonRoot == nil || !*pod.RunAsNonRoot:
		t.Errorf("pod: runAsNonRoot is not true")
	case pod.SeccompProfile == nil || pod.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("pod: seccompProfile is not RuntimeDefault")
	case sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("container %s: readOnlyRootFilesystem is not true", c.Name)
	case sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("container %s: capabilities %+v, want drop ALL", c.Name, sc.Capabilities)
	}
}

// existingObjects are the ConfigMaps and Secrets a values file names as
// existing, as "ConfigMap <name>" and "Secret <name>": the ConfigMaps of
// acknowledgements.existingConfigMap, of the address lists (addressFiles
// and each account's) and of extraVolumes, and each account's and the
// store's existingSecret (a values file may mix those with Secrets the chart
// makes).
func existingObjects(t *testing.T, file string) []string {
	t.Helper()
	if file == "" {
		return nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Acknowledgements struct {
			ExistingConfigMap string `json:"existingConfigMap"`
		} `json:"acknowledgements"`
		AddressFiles addressFiles `json:"addressFiles"`
		Accounts     []struct {
			ExistingSecret string       `json:"existingSecret"`
			AddressFiles   addressFiles `json:"addressFiles"`
		} `json:"accounts"`
		ExtraVolumes []corev1.Volume `json:"extraVolumes"`
		Store        struct {
			ExistingSecret string `json:"existingSecret"`
		} `json:"store"`
	}
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	names := []string{"ConfigMap " + values.Acknowledgements.ExistingConfigMap, "ConfigMap " + values.AddressFiles.ExistingConfigMap, "Secret " + values.Store.ExistingSecret}
	for _, a := range values.Accounts {
		names = append(names, "ConfigMap "+a.AddressFiles.ExistingConfigMap, "Secret "+a.ExistingSecret)
	}
	for _, v := range values.ExtraVolumes {
		if v.ConfigMap != nil {
			names = append(names, "ConfigMap "+v.ConfigMap.Name)
		}
	}
	return names
}

// fileKeys are the config's keys that name files the exporter reads (the
// state folder aside): each is a path or a list of paths (globs).
var fileKeys = map[string]bool{"token_file": true, "secret_files": true, "addresses_files": true, "acknowledgements_file": true, "address_key_file": true, "password_file": true}

// configFilePaths are the files the config names, at the top level or in
// an account, by key (fileKeys): paths and globs.
func configFilePaths(cfg any) map[string][]string {
	paths := map[string][]string{}
	var walk func(key string, v any)
	walk = func(key string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(k, e)
			}
		case []any:
			for _, e := range v {
				walk(key, e)
			}
		case string:
			if fileKeys[key] {
				paths[key] = append(paths[key], v)
			}
		}
	}
	walk("", cfg)
	return paths
}

// checkConfigFilesMounted: every file the config names, at the top level or
// in an account, lies under a directory the container mounts.
func checkConfigFilesMounted(t *testing.T, cfg any, mounts []corev1.VolumeMount) {
	t.Helper()
	for key, paths := range configFilePaths(cfg) {
		for _, p := range paths {
			if !slices.ContainsFunc(mounts, func(m corev1.VolumeMount) bool { return strings.HasPrefix(p, m.MountPath+"/") }) {
				t.Errorf("config %s: %s is in no mounted directory", key, p)
			}
		}
	}
}

// addressFiles is what the tests read of the chart's addressFiles values.
type addressFiles struct {
	ExistingConfigMap string `json:"existingConfigMap"`
}

// checkVolumes: every ConfigMap, Secret and claim the pod mounts is the
// chart's, or one the values name as existing.
func checkVolumes(t *testing.T, objs objects, pod corev1.PodSpec, existing []string) {
	t.Helper()
	names := map[string]bool{}
	for _, name := range existing {
		names[name] = true
	}
	for _, cm := range objs.configMaps {
		names["ConfigMap "+cm.Name] = true
	}
	for _, s := range objs.secrets {
		names["Secret "+s.Name] = true
	}
	for _, c := range objs.claims {
		names["claim "+c.Name] = true
	}
	for _, v := range pod.Volumes {
		switch {
		case v.ConfigMap != nil && !names["ConfigMap "+v.ConfigMap.Name]:
			t.Errorf("volume %s: no ConfigMap %s in the chart", v.Name, v.ConfigMap.Name)
		case v.Secret != nil && len(objs.secrets) > 0 && !names["Secret "+v.Secret.SecretName]:
			t.Errorf("volume %s: no Secret %s in the chart", v.Name, v.Secret.SecretName)
		case v.PersistentVolumeClaim != nil && len(objs.claims) > 0 && !names["claim "+v.PersistentVolumeClaim.ClaimName]:
			t.Errorf("volume %s: no claim %s in the chart", v.Name, v.PersistentVolumeClaim.ClaimName)
		}
		if v.Secret != nil {
			for _, s := range objs.secrets {
				for _, item := range v.Secret.Items {
					if _, ok := s.Data[item.Key]; s.Name == v.Secret.SecretName && !ok {
						t.Errorf("volume %s: Secret %s has no key %s", v.Name, s.Name, item.Key)
					}
				}
			}
		}
	}
}

func hasServicePort(objs objects, service, port string) bool {
	for _, svc := range objs.services {
		for _, p := range svc.Spec.Ports {
			if svc.Name == service && p.Name == port {
				return true
			}
		}
	}
	return false
}

// The chart's replicas scrape as the replicas overlay does: each pod for
// its own health, the metrics Service once for the cluster's series.
func TestChartOneCopy(t *testing.T) {
	objs := render(t, "-f", filepath.Join(chartDir, "ci", "replicas-values.yaml"), "--set", "serviceMonitor.enabled=true")
	checkOneCopy(t, objs, "breach-exporter."+monitoring+".svc:9799")
}
