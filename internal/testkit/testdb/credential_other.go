//go:build !unix

package testdb

import "os/exec"

// Credential is the OS user a private server runs as: none here, where
// tests never run as root (os.Geteuid is -1).
type Credential struct{ Uid, Gid uint32 }

func credential(int, int) *Credential { return nil }

func setCredential(*exec.Cmd, *Credential) {}
