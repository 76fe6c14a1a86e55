// SPDX-License-Identifier: Apache-2.0

package testkit

import "syscall"

// dieWithParent has the kernel kill a process started for tests when the
// test binary dies before it can (a panic, -timeout).
func dieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
