// Package deploytest runs the deployment files on real engines: the
// Dockerfile under podman (build tag container, `make container-test`).
// Without a build tag this package has no tests.
package deploytest
