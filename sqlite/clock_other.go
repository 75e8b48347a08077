//go:build !linux

package sqlite

import "time"

// hostClock is the wall clock outside Linux: this package knows no clock
// there that every process on the host reads alike and that never steps,
// so a step of the wall clock moves the expiry of every term (see the
// package documentation).
type hostClock struct{}

func (hostClock) bootID() (string, error) { return "wall", nil }
func (hostClock) hostMillis() int64       { return time.Now().UnixMilli() }
func (hostClock) wallMillis() int64       { return time.Now().UnixMilli() }
