//go:build !linux

package pgtest

import "os/exec"

// spawn starts cmd. Outside Linux there is no parent-death signal: a test
// binary killed before its cleanups run leaves the cluster behind.
func spawn(cmd *exec.Cmd) (release func(), err error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {}, nil
}
