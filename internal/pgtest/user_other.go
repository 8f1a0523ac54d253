//go:build !unix

package pgtest

import "os/exec"

// account is who runs the cluster: outside Unix, always this process's user.
type account struct{}

func clusterAccount() (account, error) { return account{}, nil }

func (account) own(string) error { return nil }

func (account) apply(*exec.Cmd) {}
