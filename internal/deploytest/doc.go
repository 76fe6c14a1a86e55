// SPDX-License-Identifier: Apache-2.0

// Package deploytest runs the deployment files on real engines: the
// Dockerfile under podman (build tag container, `make container-test`) and
// the systemd unit under systemd-analyze and a real systemd booted with
// systemd-nspawn (build tag systemd, `make systemd-test`). Without a build
// tag this package has no tests.
package deploytest
