//go:build unix

package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"syscall"
)

// account is who runs the cluster: this process's user, or the
// "postgres" user when this process is root (initdb and postgres refuse
// to run as root).
type account struct {
	cred *syscall.Credential // nil: this process's user
}

// clusterAccount returns the account to run the cluster as.
func clusterAccount() (account, error) {
	if os.Geteuid() != 0 {
		return account{}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return account{}, fmt.Errorf("running as root, and initdb refuses root: the cluster runs as the postgres user, which is missing: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return account{}, fmt.Errorf("the postgres user has ids %q and %q", u.Uid, u.Gid)
	}
	return account{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}, nil
}

// own hands dir to the account.
func (a account) own(dir string) error {
	if a.cred == nil {
		return nil
	}
	return os.Chown(dir, int(a.cred.Uid), int(a.cred.Gid))
}

// apply makes cmd run as the account.
func (a account) apply(cmd *exec.Cmd) {
	if a.cred == nil {
		return
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = a.cred
}
