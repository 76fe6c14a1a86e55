// SPDX-License-Identifier: Apache-2.0

package test

// The replicas overlay (examples/kubernetes-replicas): the base run as three
// replicas sharing a Valkey. Built and decoded as strictly as the base; the
// replicas roll without dropping a ready pod and have a disruption budget;
// only they reach the store, whose Service the config names; every
// container is restricted; and the built exporter's --config.check passes
// on the pod's files.

import (
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

const replicasOverlay = "../../kubernetes-replicas"

func TestReplicasOverlay(t *testing.T) {
	objs := build(t, filesys.MakeFsOnDisk(), replicasOverlay)
	var exporter, store *appsv1.Deployment
	for _, d := range objs.deployments {
		switch d.Name {
		case "breach-exporter":
			exporter = d
		default:
			store = d
		}
	}
	if exporter == nil || store == nil || len(objs.deployments) != 2 {
		t.Fatalf("want the exporter's Deployment and the store's among %d objects, got %d Deployments", objs.count, len(objs.deployments))
	}
	if *exporter.Spec.Replicas < 2 {
		t.Errorf("%d replicas, want several", *exporter.Spec.Replicas)
	}
	checkReplicated(t, objs, exporter)
	checkOneCopy(t, objs, "breach-exporter.monitoring.svc:9799")

	cfg := configFile(t, objs)
	section, _ := cfg["store"].(map[string]any)
	raw, _ := section["url"].(string)
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		t.Fatalf("config store.url %q: %v", raw, err)
	}
	port, _ := strconv.Atoi(u.Port())
	if !servesPods(objs, u.Hostname(), int32(port), store.Spec.Template.Labels) {
		t.Errorf("store.url %s: no Service of that name selects the store's pods on port %d", raw, port)
	}

	for _, d := range []*appsv1.Deployment{exporter, store} {
		pod := d.Spec.Template.Spec
		for _, c := range pod.Containers {
			checkRestricted(t, pod.SecurityContext, c)
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				if _, ok := c.Resources.Limits[r]; !ok {
					t.Errorf("container %s: no %s limit", c.Name, r)
				}
				if _, ok := c.Resources.Requests[r]; !ok {
					t.Errorf("container %s: no %s request", c.Name, r)
				}
			}
		}
	}
	for _, c := range exporter.Spec.Template.Spec.Containers {
		checkImage(t, c.Name, c.Image)
	}

	// The base's policy for the exporter, one for the store admitting the
	// exporter's pods alone.
	var guarded bool
	for _, np := range objs.policies {
		switch {
		case subset(np.Spec.PodSelector.MatchLabels, exporter.Spec.Template.Labels):
			checkNetworkPolicy(t, np, exporter.Spec.Template)
		case subset(np.Spec.PodSelector.MatchLabels, store.Spec.Template.Labels):
			guarded = true
			for _, rule := range np.Spec.Ingress {
				if len(rule.From) == 0 {
					t.Errorf("NetworkPolicy %s admits anyone", np.Name)
				}
				for _, peer := range rule.From {
					if peer.PodSelector == nil || peer.NamespaceSelector != nil || peer.IPBlock != nil ||
						!subset(peer.PodSelector.MatchLabels, exporter.Spec.Template.Labels) ||
						subset(peer.PodSelector.MatchLabels, store.Spec.Template.Labels) {
						t.Errorf("NetworkPolicy %s admits %+v, want the exporter's pods alone", np.Name, peer)
					}
				}
			}
		}
	}
	if !guarded {
		t.Error("no NetworkPolicy guards the store's pods")
	}

	pod := exporter.Spec.Template.Spec
	c := pod.Containers[0]
	// The base's Secret is created outside the repository.
	checkVolumes(t, objs, pod, []string{"Secret breach-exporter"})
	checkConfigFilesMounted(t, cfg, c.VolumeMounts)
	t.Run("config.check", func(t *testing.T) {
		files := podFiles(t, objs, pod.Volumes, c.VolumeMounts)
		// The demo's placeholders stand in for the base's Secret.
		for key, demo := range map[string]string{"api-token": "DEMO_ONLY_api_token", "webhook-secret": "DEMO_ONLY_webhook_secret"} {
			data, err := os.ReadFile(filepath.Join("..", "..", "demo-secrets", demo))
			if err != nil {
				t.Fatal(err)
			}
			files["/etc/breach_exporter/secrets/"+key] = data
		}
		configCheck(t, files, c)
	})
}

// checkReplicated: several replicas roll without dropping below their
// number of ready pods, have a PodDisruptionBudget, and keep their state
// folders apart (no claim a Deployment's pods would share).
func checkReplicated(t *testing.T, objs objects, dep *appsv1.Deployment) {
	t.Helper()
	s := dep.Spec.Strategy
	if s.Type != appsv1.RollingUpdateDeploymentStrategyType || s.RollingUpdate == nil ||
		s.RollingUpdate.MaxUnavailable == nil || s.RollingUpdate.MaxUnavailable.IntValue() != 0 {
		t.Errorf("Deployment %s: strategy %+v, want a RollingUpdate with maxUnavailable 0", dep.Name, s)
	}
	budgets := 0
	for _, pdb := range objs.budgets {
		if pdb.Spec.Selector != nil && subset(pdb.Spec.Selector.MatchLabels, dep.Spec.Template.Labels) {
			budgets++
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("PodDisruptionBudget %s: maxUnavailable %v, want 1", pdb.Name, pdb.Spec.MaxUnavailable)
			}
		}
	}
	if budgets != 1 {
		t.Errorf("Deployment %s: %d PodDisruptionBudgets select its pods, want 1", dep.Name, budgets)
	}
	for _, v := range dep.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			t.Errorf("volume %s: claim %s would be shared by every replica", v.Name, v.PersistentVolumeClaim.ClaimName)
		}
	}
	checkDrain(t, dep)
}

// closeSeconds is what a pod needs after its shutdown delay: the
// listeners' 5-second graceful shutdown, the last snapshot and the
// store's checkpoint (docs/deployment.md, "Stopping without refusing a
// webhook").
const closeSeconds = 15

// checkDrain: a replica that stops keeps answering while the endpoints
// forget it (a --web.shutdown-delay of a few seconds), the kubelet waits
// for the delay and the close before its SIGKILL, and a new pod stays
// ready a while before the next old one stops.
func checkDrain(t *testing.T, dep *appsv1.Deployment) {
	t.Helper()
	pod := dep.Spec.Template.Spec
	delay := time.Duration(-1)
	for _, a := range pod.Containers[0].Args {
		if v, ok := strings.CutPrefix(a, "--web.shutdown-delay="); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Errorf("Deployment %s: %s: %v", dep.Name, a, err)
			}
			delay = d
		}
	}
	switch {
	case delay < 0:
		t.Errorf("Deployment %s: no --web.shutdown-delay: a stopping replica would refuse the webhooks still routed to it", dep.Name)
	case delay < 5*time.Second:
		t.Errorf("Deployment %s: --web.shutdown-delay %v, want at least 5s with several replicas", dep.Name, delay)
	}
	grace := int64(30) // Kubernetes' default
	if pod.TerminationGracePeriodSeconds != nil {
		grace = *pod.TerminationGracePeriodSeconds
	}
	if want := int64(delay/time.Second) + closeSeconds; grace < want {
		t.Errorf("Deployment %s: terminationGracePeriodSeconds %d, want at least %d (the delay plus %d s to close)", dep.Name, grace, want, closeSeconds)
	}
	if dep.Spec.MinReadySeconds < 5 {
		t.Errorf("Deployment %s: minReadySeconds %d, want a few seconds for the endpoints to add a new pod", dep.Name, dep.Spec.MinReadySeconds)
	}
}

// servesPods reports whether a Service called name selects pods with
// labels on port.
func servesPods(objs objects, name string, port int32, labels map[string]string) bool {
	for _, svc := range objs.services {
		if svc.Name != name || len(svc.Spec.Selector) == 0 || !subset(svc.Spec.Selector, labels) {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if p.Port == port {
				return true
			}
		}
	}
	return false
}

// checkOneCopy holds a replicated deployment's scrapes to one copy of the
// cluster's series: the ServiceMonitor scrapes each pod with scope=replica,
// and one ScrapeConfig the metrics Service (target) with scope=cluster, as
// job="breach"; the pods advertise their address to each other.
func checkOneCopy(t *testing.T, objs objects, target string) {
	t.Helper()
	if len(objs.serviceMonitors) != 1 || len(objs.scrapeConfigs) != 1 {
		t.Fatalf("%d ServiceMonitors and %d ScrapeConfigs, want one each", len(objs.serviceMonitors), len(objs.scrapeConfigs))
	}
	if got := objs.serviceMonitors[0].Spec.Endpoints[0].Params["scope"]; !slices.Equal(got, []string{"replica"}) {
		t.Errorf("the ServiceMonitor scrapes the pods with scope %v, want [replica]", got)
	}
	sc := objs.scrapeConfigs[0].Spec
	if got := sc.Params["scope"]; !slices.Equal(got, []string{"cluster"}) {
		t.Errorf("the ScrapeConfig scrapes with scope %v, want [cluster]", got)
	}
	if len(sc.StaticConfigs) != 1 || len(sc.StaticConfigs[0].Targets) != 1 || string(sc.StaticConfigs[0].Targets[0]) != target {
		t.Errorf("the ScrapeConfig's targets are %+v, want the metrics Service %s alone", sc.StaticConfigs, target)
	}
	job := false
	for _, r := range sc.RelabelConfigs {
		job = job || (r.TargetLabel == "job" && r.Replacement != nil && *r.Replacement == "breach")
	}
	if !job {
		t.Error(`the ScrapeConfig does not set job="breach", which the rules select`)
	}
	args := strings.Join(objs.deployments[0].Spec.Template.Spec.Containers[0].Args, " ")
	for _, d := range objs.deployments {
		if d.Name == "breach-exporter" || strings.HasSuffix(d.Name, "-breach-exporter") {
			args = strings.Join(d.Spec.Template.Spec.Containers[0].Args, " ")
		}
	}
	if !strings.Contains(args, "--web.advertise-url=") || !strings.Contains(args, "$(POD_IP)") {
		t.Errorf("the exporter's arguments %q advertise no pod address to the other replicas", args)
	}
}
