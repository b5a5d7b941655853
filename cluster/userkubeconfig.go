package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/devk/devk/internal/fileutil"
)

// The user's kubeconfig is theirs: devk adds and removes only its own
// context, cluster and user (devk-<name>), writes the file atomically
// with the previous version kept beside it, makes it 0600 (it holds a
// cluster-admin key), gives it back to the user who ran sudo, and takes
// client-go's lock file so that a concurrent `kubectl config` is not lost.

// staleKubeconfigLock is how old client-go's <file>.lock must be before
// devk takes it for one a killed process left: client-go holds it only
// while it writes the file, milliseconds.
const staleKubeconfigLock = 5 * time.Second

// UserKubeconfigFile is the file context devk-<name> goes into:
// --kubeconfig, else the first file of $KUBECONFIG, else ~/.kube/config.
func (c *Cluster) UserKubeconfigFile() string {
	if c.UserKubeconfig != "" {
		return c.UserKubeconfig
	}
	return clientcmd.NewDefaultPathOptions().GetDefaultFilename()
}

// BackupPath of a user kubeconfig is the version before devk's last write.
func userKubeconfigBackup(path string) string { return path + ".devk-prev" }

// editUserKubeconfig loads the user's kubeconfig file (empty if there is
// none), lets edit change it, and writes it back if edit reports a change.
func (c *Cluster) editUserKubeconfig(edit func(cfg *clientcmdapi.Config) bool) (bool, error) {
	path := c.UserKubeconfigFile()
	if _, err := os.Stat(filepath.Dir(path)); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return false, err
		}
		c.giveBackToSudoUser(filepath.Dir(path))
	}
	unlock, err := c.lockUserKubeconfig(path)
	if err != nil {
		return false, err
	}
	defer unlock()
	if err := c.tightenUserKubeconfig(path); err != nil {
		return false, err
	}
	cfg := clientcmdapi.NewConfig()
	old, err := os.ReadFile(path)
	switch {
	case err == nil:
		if cfg, err = clientcmd.Load(old); err != nil {
			return false, fmt.Errorf("read your kubeconfig %s: %w (fix it, or pass --kubeconfig)", path, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return false, fmt.Errorf("read your kubeconfig: %w", err)
	}
	if !edit(cfg) {
		return false, nil
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return false, err
	}
	if old != nil {
		if err := fileutil.WriteAtomic(userKubeconfigBackup(path), old, 0o600, ""); err != nil {
			return false, fmt.Errorf("keep a copy of your kubeconfig: %w", err)
		}
		c.giveBackToSudoUser(userKubeconfigBackup(path))
	}
	if err := fileutil.WriteAtomic(path, data, 0o600, ""); err != nil {
		return false, err
	}
	c.giveBackToSudoUser(path)
	return true, nil
}

// tightenUserKubeconfig makes an existing kubeconfig holding devk's
// credentials 0600, saying so.
func (c *Cluster) tightenUserKubeconfig(path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("your kubeconfig %s is readable by others (%v) and holds a cluster-admin key: %w (chmod 600 it)", path, fi.Mode().Perm(), err)
	}
	c.Reporter.Infof("made %s 0600 (was %v): it holds a cluster-admin key", path, fi.Mode().Perm())
	return nil
}

// giveBackToSudoUser chowns path to the user who ran `sudo devk`, when
// it lies in that user's home (sudo -E keeps $HOME): otherwise their own
// ~/.kube/config would end up belonging to root.
func (c *Cluster) giveBackToSudoUser(path string) {
	uid, err1 := strconv.Atoi(os.Getenv("SUDO_UID"))
	gid, err2 := strconv.Atoi(os.Getenv("SUDO_GID"))
	if err1 != nil || err2 != nil || os.Geteuid() != 0 || uid == 0 {
		return
	}
	// The nearest existing ancestor above ~/.kube tells whose it is.
	for dir := filepath.Dir(path); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid {
			if err := os.Lchown(path, uid, gid); err != nil {
				c.Reporter.Infof("give %s back to uid %d: %v", path, uid, err)
			}
			return
		}
		if filepath.Base(dir) != ".kube" {
			return
		}
	}
}

// lockUserKubeconfig takes client-go's lock on path (<path>.lock, made
// with O_EXCL); one older than staleKubeconfigLock was left by a killed
// process and is removed, with a message.
func (c *Cluster) lockUserKubeconfig(path string) (func(), error) {
	lock := path + ".lock"
	deadline := time.Now().Add(staleKubeconfigLock)
	for {
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
		if err == nil {
			f.Close()
			return func() { os.Remove(lock) }, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("lock your kubeconfig: %w", err)
		}
		fi, serr := os.Lstat(lock)
		if serr == nil && (time.Since(fi.ModTime()) > staleKubeconfigLock || time.Now().After(deadline)) {
			if err := os.Remove(lock); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("remove the stale lock %s: %w", lock, err)
			}
			c.Reporter.Infof("removed %s, a lock on your kubeconfig that a killed kubectl or devk left (%s old)", lock, time.Since(fi.ModTime()).Round(time.Second))
			continue
		}
		time.Sleep(100 * time.Millisecond)
	}
}
