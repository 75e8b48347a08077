//go:build unix

package testdb

import (
	"os/exec"
	"syscall"
)

// Credential is the OS user a private server runs as.
type Credential = syscall.Credential

func credential(uid, gid int) *Credential {
	return &Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

func setCredential(cmd *exec.Cmd, cred *Credential) {
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
}
