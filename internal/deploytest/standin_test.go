// SPDX-License-Identifier: Apache-2.0

//go:build container

package deploytest

// The Dockerfile's base images come from registries (Docker Hub, gcr.io)
// that CI machines and this workspace cannot reach. The container test
// therefore builds LOCAL STAND-INS for them from what the machine has and
// tags them exactly as the Dockerfile names them:
//
//   - the build image (golang:<version>): the machine's Go toolchain at
//     /usr/local/go, /bin/sh and mkdir with their shared libraries, and a file-based
//     Go module proxy holding exactly the modules of this module's graph,
//     taken from the machine's module cache (GOPROXY=file:///goproxy), so the
//     build runs with no network at all;
//   - the runtime image (gcr.io/distroless/static-debian12:nonroot): what a
//     static binary needs and distroless provides: /etc/passwd and
//     /etc/group with nonroot (65532), CA certificates, /tmp and the user's
//     home, and USER 65532 like the real image.
//
// They prove that the Dockerfile builds and that its image runs locked down;
// they are not the published images.

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"unicode"
)

// rootfs writes a root filesystem as a tar stream, parents first.
type rootfs struct {
	tw   *tar.Writer
	dirs map[string]bool
}

func newRootfs(w io.Writer) *rootfs {
	return &rootfs{tw: tar.NewWriter(w), dirs: map[string]bool{"/": true}}
}

func (r *rootfs) dir(name string, mode int64, uid int) error {
	name = path.Clean("/" + name)
	if r.dirs[name] {
		return nil
	}
	if err := r.dir(path.Dir(name), 0o755, 0); err != nil {
		return err
	}
	r.dirs[name] = true
	return r.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(name, "/") + "/",
		Mode: mode, Uid: uid, Gid: uid})
}

func (r *rootfs) file(name string, mode int64, uid int, data []byte) error {
	name = path.Clean("/" + name)
	if err := r.dir(path.Dir(name), 0o755, 0); err != nil {
		return err
	}
	if err := r.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(name, "/"),
		Mode: mode, Uid: uid, Gid: uid, Size: int64(len(data))}); err != nil {
		return err
	}
	_, err := r.tw.Write(data)
	return err
}

// copyFile copies src (following symbolic links) to name, keeping its mode.
func (r *rootfs) copyFile(name, src string) error {
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return r.file(name, int64(info.Mode().Perm()), 0, data)
}

// copyTree copies the tree at src to dst, skipping the top-level entries
// named in skip; symbolic links stay links.
func (r *rootfs) copyTree(dst, src string, skip ...string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		for _, s := range skip {
			if rel == s {
				return filepath.SkipDir
			}
		}
		name := path.Join(dst, filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return r.dir(name, int64(info.Mode().Perm()), 0)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return r.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: strings.TrimPrefix(name, "/"),
				Linkname: target, Mode: 0o777})
		case d.Type().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if err := r.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(name, "/"),
				Mode: int64(info.Mode().Perm()), Size: info.Size()}); err != nil {
				return err
			}
			_, err = io.Copy(r.tw, f)
			return err
		}
		return nil // sockets, devices: nothing a toolchain needs
	})
}

func (r *rootfs) close() error { return r.tw.Close() }

// toolchainEnv is the stand-in build image's configuration; PATH, GOPATH and
// GOTOOLCHAIN are those of the official golang image.
var toolchainEnv = []string{
	"PATH=/usr/local/go/bin:/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"GOPATH=/go",
	"GOTOOLCHAIN=local",
	// Stand-in only: modules come from the image's own file proxy, checked
	// against go.sum, so the build needs no network.
	"GOPROXY=file:///goproxy",
	"GOSUMDB=off",
}

// writeToolchainRootfs writes the stand-in build image: the machine's
// GOROOT at /usr/local/go, /bin/sh and mkdir with their libraries, and
// /goproxy.
func writeToolchainRootfs(w io.Writer, goroot, modRoot string) error {
	r := newRootfs(w)
	for _, d := range []struct {
		name string
		mode int64
	}{{"/tmp", 0o1777}, {"/root", 0o700}, {"/go", 0o755}, {"/etc", 0o755}} {
		if err := r.dir(d.name, d.mode, 0); err != nil {
			return err
		}
	}
	if err := r.file("/etc/passwd", 0o644, 0, []byte("root:x:0:0:root:/root:/bin/sh\n")); err != nil {
		return err
	}
	if err := r.file("/etc/group", 0o644, 0, []byte("root:x:0:\n")); err != nil {
		return err
	}
	// The Dockerfile's RUN lines are shell form: /bin/sh, the tools they
	// call that the real golang image has (Debian's coreutils), and what
	// they link.
	copied := map[string]bool{}
	for _, tool := range []string{"/bin/sh", "/bin/mkdir"} {
		real, libs, err := sharedObjects(tool)
		if err != nil {
			return err
		}
		if err := r.copyFile(tool, real); err != nil {
			return err
		}
		for _, lib := range libs {
			if !copied[lib] {
				copied[lib] = true
				if err := r.copyFile(lib, lib); err != nil {
					return err
				}
			}
		}
	}
	// The toolchain's own regression tests are the one large part a build
	// never reads.
	if err := r.copyTree("/usr/local/go", goroot, "test"); err != nil {
		return err
	}
	if err := writeModuleProxy(r, "/goproxy", modRoot); err != nil {
		return err
	}
	return r.close()
}

// sharedObjects resolves bin and lists the shared objects ldd says it loads
// (none for a static binary).
func sharedObjects(bin string) (string, []string, error) {
	real, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return "", nil, err
	}
	out, err := exec.Command("ldd", real).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return real, nil, nil
		}
		return "", nil, fmt.Errorf("ldd %s: %v\n%s", real, err, out)
	}
	var libs []string
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "/") {
			libs = append(libs, f)
		}
	}
	return real, libs, nil
}

// writeModuleProxy lays out, in GOPROXY form, the .info, .mod and .zip files
// of every module version in this module's graph that the machine's module
// cache holds (`go mod download` has just filled it).
func writeModuleProxy(r *rootfs, dst, modRoot string) error {
	if out, err := goCmd(modRoot, "mod", "download"); err != nil {
		return fmt.Errorf("go mod download: %v\n%s", err, out)
	}
	cache, err := goCmd(modRoot, "env", "GOMODCACHE")
	if err != nil {
		return fmt.Errorf("go env GOMODCACHE: %v\n%s", err, cache)
	}
	download := filepath.Join(strings.TrimSpace(cache), "cache", "download")
	graph, err := goCmd(modRoot, "mod", "graph")
	if err != nil {
		return fmt.Errorf("go mod graph: %v\n%s", err, graph)
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(graph))
	for sc.Scan() {
		for _, mv := range strings.Fields(sc.Text()) {
			mod, ver, ok := strings.Cut(mv, "@")
			if !ok || mod == "go" || mod == "toolchain" || seen[mv] {
				continue
			}
			seen[mv] = true
			dir := escapeModulePath(mod) + "/@v/"
			for _, ext := range []string{".info", ".mod", ".zip"} {
				src := filepath.Join(download, filepath.FromSlash(dir+ver+ext))
				if _, err := os.Stat(src); err != nil {
					continue // not needed to build: go never fetched it
				}
				if err := r.copyFile(path.Join(dst, dir+ver+ext), src); err != nil {
					return err
				}
			}
		}
	}
	return sc.Err()
}

func goCmd(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// escapeModulePath is the module cache's case encoding: every upper-case
// letter becomes '!' and its lower case.
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, c := range p {
		if unicode.IsUpper(c) {
			b.WriteByte('!')
			c = unicode.ToLower(c)
		}
		b.WriteRune(c)
	}
	return b.String()
}

// runtimeUser is distroless's nonroot user and group.
const runtimeUser = 65532

// writeRuntimeRootfs writes the stand-in runtime image, distroless-like:
// users and groups, CA certificates, /tmp and nonroot's home; no shell.
func writeRuntimeRootfs(w io.Writer) error {
	r := newRootfs(w)
	if err := r.dir("/tmp", 0o1777, 0); err != nil {
		return err
	}
	if err := r.dir("/home/nonroot", 0o700, runtimeUser); err != nil {
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\n"+
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"+
		"nonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", runtimeUser, runtimeUser)
	group := fmt.Sprintf("root:x:0:\nnobody:x:65534:\nnonroot:x:%d:\n", runtimeUser)
	if err := r.file("/etc/passwd", 0o644, 0, []byte(passwd)); err != nil {
		return err
	}
	if err := r.file("/etc/group", 0o644, 0, []byte(group)); err != nil {
		return err
	}
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		if err := r.copyFile("/etc/ssl/certs/ca-certificates.crt", "/etc/ssl/certs/ca-certificates.crt"); err != nil {
			return err
		}
	}
	return r.close()
}

// baseImages are the images a Dockerfile builds FROM, by role.
type baseImages struct {
	build   string // the Go toolchain image
	runtime string // the image the binary runs on
}

var (
	argLine  = regexp.MustCompile(`(?i)^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$`)
	fromLine = regexp.MustCompile(`(?i)^FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$`)
	argRef   = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?`)
)

// parseBaseImages reads the FROM lines, expanding the ARG defaults declared
// before the first FROM, and sorts the images that are not earlier stages
// into the Go toolchain (golang) and the runtime image.
func parseBaseImages(dockerfile string) (baseImages, error) {
	var imgs baseImages
	args := map[string]string{}
	stages := map[string]bool{}
	sawFrom := false
	for _, line := range strings.Split(dockerfile, "\n") {
		line = strings.TrimSpace(line)
		if m := argLine.FindStringSubmatch(line); m != nil && !sawFrom {
			args[m[1]] = m[2]
			continue
		}
		m := fromLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		sawFrom = true
		ref := argRef.ReplaceAllStringFunc(m[1], func(s string) string {
			return args[argRef.FindStringSubmatch(s)[1]]
		})
		earlier := stages[strings.ToLower(ref)]
		if m[2] != "" {
			stages[strings.ToLower(m[2])] = true
		}
		if earlier {
			continue // FROM an earlier stage
		}
		repo := ref
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		}
		switch {
		case path.Base(repo) == "golang":
			if imgs.build != "" && imgs.build != ref {
				return imgs, fmt.Errorf("two Go images: %s and %s", imgs.build, ref)
			}
			imgs.build = ref
		default:
			if imgs.runtime != "" && imgs.runtime != ref {
				return imgs, fmt.Errorf("two runtime images: %s and %s; the test has one stand-in for a distroless-like image", imgs.runtime, ref)
			}
			imgs.runtime = ref
		}
	}
	if imgs.build == "" || imgs.runtime == "" {
		return imgs, fmt.Errorf("expected a golang build image and a runtime image, found %+v", imgs)
	}
	return imgs, nil
}

// qualify names ref as Docker does: docker.io/library/golang:1.26.8 for
// golang:1.26.8, so podman finds the stand-in under the same name.
func qualify(ref string) string {
	first, _, found := strings.Cut(ref, "/")
	if found && (strings.ContainsAny(first, ".:") || first == "localhost") {
		return ref
	}
	if !found {
		return "docker.io/library/" + ref
	}
	return "docker.io/" + ref
}

// parserDirectives returns the Dockerfile's parser directives: the
// `# key=value` comments before any other line.
func parserDirectives(dockerfile string) map[string]string {
	d := map[string]string{}
	for _, line := range strings.Split(dockerfile, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "#") {
			break
		}
		k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), "=")
		if !ok || strings.ContainsAny(strings.TrimSpace(k), " \t") {
			break
		}
		d[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	return d
}
