// SPDX-License-Identifier: Apache-2.0

//go:build !linux

package testkit

import "syscall"

// dieWithParent: only Linux has the kernel kill a child with its parent.
func dieWithParent() *syscall.SysProcAttr { return nil }
