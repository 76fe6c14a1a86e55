// SPDX-License-Identifier: Apache-2.0

// Package test builds examples/kubernetes with kustomize's own library and
// decodes every object strictly into its real API type: k8s.io/api for the
// built-in kinds, the Prometheus Operator's monitoring/v1 for ServiceMonitor
// and PrometheusRule. A misspelt or misplaced field fails here as the API
// server would reject it. It is a module of its own so that these
// dependencies stay out of the exporter's go.mod: `make kubernetes-test`.
package test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const (
	imageRepo  = "ghcr.io/breach-exporter/breach_exporter"
	monitoring = "monitoring" // the namespace Prometheus scrapes from
)

// typed returns an empty value of the API type for apiVersion and kind.
func typed(apiVersion, kind string) (any, bool) {
	switch apiVersion + "/" + kind {
	case "v1/ConfigMap":
		return &corev1.ConfigMap{}, true
	case "v1/Secret":
		return &corev1.Secret{}, true
	case "v1/Service":
		return &corev1.Service{}, true
	case "v1/ServiceAccount":
		return &corev1.ServiceAccount{}, true
	case "v1/PersistentVolumeClaim":
		return &corev1.PersistentVolumeClaim{}, true
	case "networking.k8s.io/v1/Ingress":
		return &networkingv1.Ingress{}, true
	case "apps/v1/Deployment":
		return &appsv1.Deployment{}, true
	case "networking.k8s.io/v1/NetworkPolicy":
		return &networkingv1.NetworkPolicy{}, true
	case "monitoring.coreos.com/v1/ServiceMonitor":
		return &monitoringv1.ServiceMonitor{}, true
	case "monitoring.coreos.com/v1/PrometheusRule":
		return &monitoringv1.PrometheusRule{}, true
	case "monitoring.coreos.com/v1alpha1/ScrapeConfig":
		return &monitoringv1alpha1.ScrapeConfig{}, true
	case "policy/v1/PodDisruptionBudget":
		return &policyv1.PodDisruptionBudget{}, true
	}
	return nil, false
}

// objects are the built kustomization or the rendered chart, decoded.
type objects struct {
	deployments     []*appsv1.Deployment
	services        []*corev1.Service
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	claims          []*corev1.PersistentVolumeClaim
	ingresses       []*networkingv1.Ingress
	policies        []*networkingv1.NetworkPolicy
	serviceMonitors []*monitoringv1.ServiceMonitor
	scrapeConfigs   []*monitoringv1alpha1.ScrapeConfig
	rules           []*monitoringv1.PrometheusRule
	budgets         []*policyv1.PodDisruptionBudget
	count           int
}

// add decodes one object strictly (an unknown field, a typo or a field at
// the wrong level, is an error) and files it by type.
func (objs *objects) add(t *testing.T, id, apiVersion, kind string, data []byte) {
	t.Helper()
	obj, ok := typed(apiVersion, kind)
	if !ok {
		t.Errorf("%s: apiVersion %s has no type in this test; add it to typed()", id, apiVersion)
		return
	}
	if err := decodeStrict(data, obj); err != nil {
		t.Errorf("%s: %v", id, err)
		return
	}
	objs.count++
	switch o := obj.(type) {
	case *appsv1.Deployment:
		objs.deployments = append(objs.deployments, o)
	case *corev1.Service:
		objs.services = append(objs.services, o)
	case *corev1.ConfigMap:
		objs.configMaps = append(objs.configMaps, o)
	case *corev1.Secret:
		objs.secrets = append(objs.secrets, o)
	case *corev1.PersistentVolumeClaim:
		objs.claims = append(objs.claims, o)
	case *networkingv1.Ingress:
		objs.ingresses = append(objs.ingresses, o)
	case *networkingv1.NetworkPolicy:
		objs.policies = append(objs.policies, o)
	case *monitoringv1.ServiceMonitor:
		objs.serviceMonitors = append(objs.serviceMonitors, o)
	case *monitoringv1.PrometheusRule:
		objs.rules = append(objs.rules, o)
	case *monitoringv1alpha1.ScrapeConfig:
		objs.scrapeConfigs = append(objs.scrapeConfigs, o)
	case *policyv1.PodDisruptionBudget:
		objs.budgets = append(objs.budgets, o)
	}
}

// build runs kustomize on dir and decodes every object strictly.
func build(t *testing.T, fs filesys.FileSystem, dir string) objects {
	t.Helper()
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fs, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs objects
	for _, r := range m.Resources() {
		id := fmt.Sprintf("%s %s/%s", r.GetKind(), r.GetNamespace(), r.GetName())
		data, err := r.AsYAML()
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		objs.add(t, id, r.GetApiVersion(), r.GetKind(), data)
	}
	return objs
}

// decodeStrict decodes as the API server does: case-sensitively (plain
// encoding/json, and so yaml.UnmarshalStrict, would take
// readOnlyRootFileSystem for readOnlyRootFilesystem), with unknown and
// duplicate fields as errors.
func decodeStrict(data []byte, into any) error {
	j, err := yaml.YAMLToJSONStrict(data)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, into, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func TestStrictDecodingRejectsUnknownFields(t *testing.T) {
	for _, field := range []string{"replica: 1", "Replicas: 1", "replicas: 1\n  replicas: 2"} {
		bad := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  " + field + "\n")
		if err := decodeStrict(bad, &appsv1.Deployment{}); err == nil {
			t.Errorf("spec.%q decoded without error", field)
		}
	}
}

func TestKustomization(t *testing.T) {
	objs := build(t, filesys.MakeFsOnDisk(), "..")
	if len(objs.deployments) != 1 {
		t.Fatalf("want one Deployment among %d objects, got %d", objs.count, len(objs.deployments))
	}
	dep := objs.deployments[0]
	pod := dep.Spec.Template

	t.Run("image", func(t *testing.T) {
		for _, c := range pod.Spec.Containers {
			checkImage(t, c.Name, c.Image)
		}
	})

	t.Run("resources", func(t *testing.T) {
		for _, c := range pod.Spec.Containers {
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, hasReq := c.Resources.Requests[r]
				limit, hasLimit := c.Resources.Limits[r]
				if !hasReq || !hasLimit {
					t.Errorf("container %s: %s request %v, limit %v: want both", c.Name, r, req.String(), limit.String())
				} else if req.Cmp(limit) > 0 {
					t.Errorf("container %s: %s request %s above its limit %s", c.Name, r, req.String(), limit.String())
				}
			}
		}
	})

	t.Run("NetworkPolicy", func(t *testing.T) {
		if len(objs.policies) != 1 {
			t.Fatalf("want one NetworkPolicy, got %d: the webhook port faces the internet", len(objs.policies))
		}
		checkNetworkPolicy(t, objs.policies[0], pod)
	})

	t.Run("ServiceMonitor", func(t *testing.T) {
		if len(objs.serviceMonitors) != 1 {
			t.Fatalf("want one ServiceMonitor, got %d", len(objs.serviceMonitors))
		}
		sm := objs.serviceMonitors[0]
		release, ok := sm.Labels["release"]
		if !ok || release == "" {
			t.Errorf("ServiceMonitor %s has no release label for a serviceMonitorSelector to match: %v", sm.Name, sm.Labels)
		}
		for _, r := range objs.rules {
			if r.Labels["release"] != release {
				t.Errorf("PrometheusRule %s: release label %q, the ServiceMonitor's is %q", r.Name, r.Labels["release"], release)
			}
		}
		selected := 0
		for _, svc := range objs.services {
			if subset(sm.Spec.Selector.MatchLabels, svc.Labels) && svc.Namespace == dep.Namespace {
				selected++
			}
		}
		if selected != 1 {
			t.Errorf("ServiceMonitor %s selects %d Services, want 1", sm.Name, selected)
		}
	})
}

// A registry, and a version tag: `breach_exporter:latest` is pulled from
// Docker Hub, where it does not exist.
var versionTag = regexp.MustCompile(`^v\d+\.\d+\.\d+([-+.][0-9A-Za-z.-]+)?$`)

func checkImage(t *testing.T, container, image string) {
	t.Helper()
	name, tag, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, tag = name[:i], name[i+1:]
	}
	registry, _, found := strings.Cut(name, "/")
	if !found || !(strings.ContainsAny(registry, ".:") || registry == "localhost") {
		t.Errorf("container %s: image %q names no registry", container, image)
	}
	if !versionTag.MatchString(tag) {
		t.Errorf("container %s: image %q has no version tag (vX.Y.Z)", container, image)
	}
}

// checkNetworkPolicy: the policy selects the exporter's pods and admits the
// webhook port from anywhere, the metrics port from the monitoring
// namespace only, and nothing else.
func checkNetworkPolicy(t *testing.T, np *networkingv1.NetworkPolicy, pod corev1.PodTemplateSpec) {
	t.Helper()
	if !subset(np.Spec.PodSelector.MatchLabels, pod.Labels) || len(np.Spec.PodSelector.MatchExpressions) > 0 {
		t.Errorf("NetworkPolicy %s does not select the exporter's pods", np.Name)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
		t.Errorf("NetworkPolicy %s has no Ingress policy type: %v", np.Name, np.Spec.PolicyTypes)
	}
	ports := map[string]int32{}
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
	}
	if ports["webhook"] == 0 || ports["metrics"] == 0 {
		t.Fatalf("the container names no webhook and metrics ports: %v", ports)
	}
	portName := func(p *intstr.IntOrString) string {
		if p == nil {
			return "every port"
		}
		if p.Type == intstr.String {
			return p.StrVal
		}
		for name, n := range ports {
			if n == p.IntVal {
				return name
			}
		}
		return p.String()
	}
	// from: "anywhere" or "namespace <name>"; what each source may reach.
	admitted := map[string][]string{}
	for _, rule := range np.Spec.Ingress {
		var sources []string
		if len(rule.From) == 0 {
			sources = []string{"anywhere"}
		}
		for _, peer := range rule.From {
			switch {
			case peer.IPBlock != nil:
				sources = append(sources, "ipBlock "+peer.IPBlock.CIDR)
			case peer.NamespaceSelector != nil && peer.PodSelector == nil &&
				len(peer.NamespaceSelector.MatchExpressions) == 0 && len(peer.NamespaceSelector.MatchLabels) == 1 &&
				peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "":
				sources = append(sources, "namespace "+peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
			default:
				sources = append(sources, fmt.Sprintf("peer %+v", peer))
			}
		}
		var reach []string
		if len(rule.Ports) == 0 {
			reach = []string{"every port"}
		}
		for _, p := range rule.Ports {
			if p.EndPort != nil {
				reach = append(reach, "a port range")
				continue
			}
			reach = append(reach, portName(p.Port))
		}
		for _, s := range sources {
			admitted[s] = append(admitted[s], reach...)
		}
	}
	want := map[string][]string{"anywhere": {"webhook"}, "namespace " + monitoring: {"metrics"}}
	for s := range admitted {
		slices.Sort(admitted[s])
		admitted[s] = slices.Compact(admitted[s])
	}
	if fmt.Sprint(admitted) != fmt.Sprint(want) {
		t.Errorf("NetworkPolicy %s admits %v; want %v", np.Name, admitted, want)
	}
}

// TestImageOverride: an overlay's images: entry changes the registry and the
// tag, as kustomization.yaml tells users to.
func TestImageOverride(t *testing.T) {
	// The base is copied into an in-memory file system: kustomize takes no
	// absolute base paths, and the test writes nothing into the repository.
	fs := filesys.MakeFsInMemory()
	files, err := filepath.Glob("../*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := fs.WriteFile("/base/"+filepath.Base(f), data); err != nil {
			t.Fatal(err)
		}
	}
	if err := fs.WriteFile("/overlay/kustomization.yaml", []byte(`resources:
  - ../base
images:
  - name: `+imageRepo+`
    newName: registry.example.com/mirror/breach_exporter
    newTag: v9.8.7
`)); err != nil {
		t.Fatal(err)
	}
	objs := build(t, fs, "/overlay")
	if len(objs.deployments) != 1 {
		t.Fatalf("%d Deployments", len(objs.deployments))
	}
	if got := objs.deployments[0].Spec.Template.Spec.Containers[0].Image; got != "registry.example.com/mirror/breach_exporter:v9.8.7" {
		t.Errorf("images: override gave image %q", got)
	}
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
