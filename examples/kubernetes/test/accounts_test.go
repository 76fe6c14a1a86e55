// SPDX-License-Identifier: Apache-2.0

package test

// The accounts overlay (examples/kubernetes-accounts): the base with two
// accounts, each with its own Secret and address lists ConfigMap. Built and
// decoded as strictly as the base; every file its configuration names is a
// key of a Secret or ConfigMap the pod mounts as a whole directory; and the
// built exporter's --config.check passes on the pod's files, laid out in a
// temporary directory.

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// The overlay is beside the base, not in it: kustomize refuses a base that
// contains its overlay.
const accountsOverlay = "../../kubernetes-accounts"

func TestAccountsOverlay(t *testing.T) {
	objs := build(t, filesys.MakeFsOnDisk(), accountsOverlay)
	if len(objs.deployments) != 1 {
		t.Fatalf("want one Deployment among %d objects, got %d", objs.count, len(objs.deployments))
	}
	pod := objs.deployments[0].Spec.Template.Spec
	c := pod.Containers[0]
	cfg := configFile(t, objs)

	accounts, _ := cfg["accounts"].([]any)
	tokens := map[string]bool{}
	for _, a := range accounts {
		api, _ := a.(map[string]any)["api"].(map[string]any)
		token, _ := api["token_file"].(string)
		tokens[path.Dir(token)] = true
	}
	if len(accounts) < 2 || len(tokens) != len(accounts) {
		t.Errorf("want two accounts or more, each with its token in a directory of its own: %d accounts, token directories %v", len(accounts), slices.Sorted(maps.Keys(tokens)))
	}

	// What the overlay inherits from the base, unchanged by its patches.
	for _, c := range pod.Containers {
		checkImage(t, c.Name, c.Image)
		checkRestricted(t, pod.SecurityContext, c)
	}
	if len(objs.policies) != 1 {
		t.Errorf("want the base's NetworkPolicy, got %d", len(objs.policies))
	}
	checkVolumes(t, objs, pod, nil)
	checkConfigFilesMounted(t, cfg, c.VolumeMounts)
	for _, m := range c.VolumeMounts {
		if m.SubPath != "" || m.SubPathExpr != "" {
			t.Errorf("mount %s uses a subPath: the kubelet never updates such a file", m.MountPath)
		}
	}
	files := podFiles(t, objs, pod.Volumes, c.VolumeMounts)
	mounted := slices.Sorted(maps.Keys(files))
	for key, paths := range configFilePaths(cfg) {
		for _, p := range paths {
			if key != "addresses_files" {
				if _, ok := files[p]; !ok {
					t.Errorf("config %s: %s is no key of a mounted Secret or ConfigMap", key, p)
				}
				continue
			}
			// The kubelet's own entries of a ConfigMap's directory: a
			// glob must match the files, never these.
			for _, entry := range []string{"..data", "..2026_01_02_03_04_05.123456789"} {
				if ok, _ := path.Match(p, path.Join(path.Dir(p), entry)); ok {
					t.Errorf("config %s: %s matches the kubelet's %s: name the files' endings", key, p, entry)
				}
			}
			if !slices.ContainsFunc(mounted, func(f string) bool { ok, _ := path.Match(p, f); return ok }) {
				t.Errorf("config %s: %s matches no key of a mounted ConfigMap", key, p)
			}
		}
	}

	t.Run("config.check", func(t *testing.T) {
		configCheck(t, files, c)
	})
}

// podFiles are the files the kubelet puts in the container from the
// ConfigMaps and Secrets among objs, by path: each key (or each item's
// path) under the volume's mount.
func podFiles(t *testing.T, objs objects, volumes []corev1.Volume, mounts []corev1.VolumeMount) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, m := range mounts {
		i := slices.IndexFunc(volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Errorf("mount %s: no volume %s", m.MountPath, m.Name)
			continue
		}
		var data map[string][]byte
		var items []corev1.KeyToPath
		switch v := volumes[i]; {
		case v.ConfigMap != nil:
			for _, cm := range objs.configMaps {
				if cm.Name == v.ConfigMap.Name {
					data = maps.Clone(cm.BinaryData)
					if data == nil {
						data = map[string][]byte{}
					}
					for k, s := range cm.Data {
						data[k] = []byte(s)
					}
				}
			}
			items = v.ConfigMap.Items
		case v.Secret != nil:
			for _, s := range objs.secrets {
				if s.Name == v.Secret.SecretName {
					data = s.Data
				}
			}
			items = v.Secret.Items
		}
		for k, d := range data {
			name := k
			if len(items) > 0 {
				j := slices.IndexFunc(items, func(it corev1.KeyToPath) bool { return it.Key == k })
				if j < 0 {
					continue
				}
				name = items[j].Path
			}
			files[path.Join(m.MountPath, name)] = d
		}
	}
	return files
}

// configCheck builds the exporter from the repository, lays out files (the
// container's) under a temporary directory, rewrites the config's paths to
// point there and runs the container's arguments with --config.check: the
// tokens, secrets and address files are read as the pod would read them.
func configCheck(t *testing.T, files map[string][]byte, c corev1.Container) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool on PATH to build the exporter")
	}
	files = maps.Clone(files)
	dir := t.TempDir()
	exporter := filepath.Join(dir, "breach_exporter")
	build := exec.Command(goTool, "build", "-o", exporter, ".")
	build.Dir = "../../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	root := filepath.Join(dir, "pod")
	// The longest mount path first: a replacer takes the first that matches.
	mounts := slices.Clone(c.VolumeMounts)
	slices.SortFunc(mounts, func(a, b corev1.VolumeMount) int { return len(b.MountPath) - len(a.MountPath) })
	var pairs []string
	for _, m := range mounts {
		pairs = append(pairs, m.MountPath+"/", root+m.MountPath+"/")
	}
	inRoot := strings.NewReplacer(pairs...)
	var args []string
	for _, a := range c.Args {
		if f, ok := strings.CutPrefix(a, "--config.file="); ok {
			conf, ok := files[f]
			if !ok {
				t.Fatalf("--config.file=%s is no key of a mounted ConfigMap", f)
			}
			files[f] = []byte(inRoot.Replace(string(conf)))
			a = "--config.file=" + root + f
		}
		args = append(args, a)
	}
	for f, data := range files {
		p := filepath.Join(root, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(exporter, append(args, "--config.check")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "is valid") {
		t.Errorf("--config.check: %v\n%s%s", err, out, stderr.String())
	} else if stderr.Len() > 0 {
		t.Errorf("--config.check warns:\n%s", stderr.String())
	}
}
