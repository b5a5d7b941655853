package kubeconfig

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/poll"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
)

// The user's kubeconfig is theirs: devk adds and removes only its own
// context, cluster and user (devk-<name>), writes the file atomically
// with the previous version kept beside it, makes it 0600 (it holds a
// cluster-admin key), gives it back to the user who ran sudo, and takes
// client-go's lock file so that a concurrent `kubectl config` is not lost.

const (
	// staleLock is how old client-go's <file>.lock must be before devk
	// takes it for one a killed process left: client-go holds it only
	// while it writes the file, milliseconds. devk waits no longer than
	// that for it either.
	staleLock        = 5 * time.Second
	lockPollInterval = 100 * time.Millisecond
)

// User is the user's kubeconfig file.
type User struct {
	// Path is the file (DefaultUserPath unless --kubeconfig names one).
	Path string
	// Reporter hears what devk does to the file besides the edit: a
	// chmod, a stale lock removed, a failed chown.
	Reporter progress.Reporter
}

// DefaultUserPath is the file context devk-<name> goes into without
// --kubeconfig: the first file of $KUBECONFIG, else ~/.kube/config.
func DefaultUserPath() string { return clientcmd.NewDefaultPathOptions().GetDefaultFilename() }

// BackupPath of a user kubeconfig is the version before devk's last write.
func BackupPath(path string) string { return path + ".devk-prev" }

// edit loads the user's kubeconfig file (empty if there is none), lets
// change change it, and writes it back if change reports a change.
func (u User) edit(ctx context.Context, change func(cfg *clientcmdapi.Config) bool) (bool, error) {
	path := u.Path
	if _, err := os.Stat(filepath.Dir(path)); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return false, err
		}
		u.giveBackToSudoUser(filepath.Dir(path))
	}
	unlock, err := u.lock(ctx)
	if err != nil {
		return false, err
	}
	defer unlock()
	if err := u.tighten(); err != nil {
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
	if !change(cfg) {
		return false, nil
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return false, err
	}
	if old != nil {
		if err := atomicfile.Write(BackupPath(path), old, 0o600, ""); err != nil {
			return false, fmt.Errorf("keep a copy of your kubeconfig: %w", err)
		}
		u.giveBackToSudoUser(BackupPath(path))
	}
	if err := atomicfile.Write(path, data, 0o600, ""); err != nil {
		return false, err
	}
	u.giveBackToSudoUser(path)
	return true, nil
}

// tighten makes an existing kubeconfig holding devk's credentials 0600,
// saying so.
func (u User) tighten() error {
	path := u.Path
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("your kubeconfig %s is readable by others (%v) and holds a cluster-admin key: %w (chmod 600 it)", path, fi.Mode().Perm(), err)
	}
	u.Reporter.Infof("made %s 0600 (was %v): it holds a cluster-admin key", path, fi.Mode().Perm())
	return nil
}

// giveBackToSudoUser chowns path to the user who ran `sudo devk`, when
// it lies in that user's home (sudo -E keeps $HOME): otherwise their own
// ~/.kube/config would end up belonging to root.
func (u User) giveBackToSudoUser(path string) {
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
				u.Reporter.Infof("give %s back to uid %d: %v", path, uid, err)
			}
			return
		}
		if filepath.Base(dir) != ".kube" {
			return
		}
	}
}

// lock takes client-go's lock on the file (<path>.lock, made with
// O_EXCL), waiting for its holder at most staleLock; a lock older than
// that, or still held after it, was left by a killed process and is
// removed, with a message.
func (u User) lock(ctx context.Context) (func(), error) {
	lock := u.Path + ".lock"
	take := func() (bool, error) {
		f, err := os.OpenFile(lock, os.O_CREATE|os.O_EXCL|os.O_WRONLY|syscall.O_NOFOLLOW, 0o600)
		if err == nil {
			f.Close()
			return true, nil
		}
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, fmt.Errorf("lock your kubeconfig: %w", err)
	}
	removeStale := func() error {
		fi, err := os.Lstat(lock)
		if err != nil {
			return nil // its holder let it go meanwhile
		}
		if err := os.Remove(lock); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove the stale lock %s: %w", lock, err)
		}
		u.Reporter.Infof("removed %s, a lock on your kubeconfig that a killed kubectl or devk left (%s old)", lock, time.Since(fi.ModTime()).Round(time.Second))
		return nil
	}
	unlock := func() { os.Remove(lock) }
	err := wait.PollUntilContextTimeout(ctx, lockPollInterval, staleLock, true, func(context.Context) (bool, error) {
		if ok, err := take(); ok || err != nil {
			return ok, err
		}
		if fi, err := os.Lstat(lock); err == nil && time.Since(fi.ModTime()) > staleLock {
			if err := removeStale(); err != nil {
				return false, err
			}
			return take()
		}
		return false, nil
	})
	if poll.TimedOut(ctx, err) {
		if err := removeStale(); err != nil {
			return nil, err
		}
		ok, err := take()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, fmt.Errorf("lock your kubeconfig: %s is taken again at once; is another devk or kubectl writing it?", lock)
		}
		return unlock, nil
	}
	if err != nil {
		return nil, err
	}
	return unlock, nil
}

// MergeAdmin adds cluster, user and context ContextName(clusterName), from
// the kubeconfig admin (admin.conf), to the user's kubeconfig and makes it
// the current context when it was added or changed.
func (u User) MergeAdmin(ctx context.Context, clusterName, admin string) (phase.Outcome, error) {
	cfg, err := clientcmd.LoadFromFile(admin)
	if err != nil {
		return phase.Done, fmt.Errorf("read %s: %w (run `devk up phase kubeconfig/admin`)", admin, err)
	}
	actx := cfg.Contexts[cfg.CurrentContext]
	if actx == nil || cfg.Clusters[actx.Cluster] == nil || cfg.AuthInfos[actx.AuthInfo] == nil {
		return phase.Done, fmt.Errorf("%s has no current context: run `devk up phase kubeconfig/admin`", admin)
	}
	name := ContextName(clusterName)
	cl, ai := cfg.Clusters[actx.Cluster].DeepCopy(), cfg.AuthInfos[actx.AuthInfo].DeepCopy()
	cl.LocationOfOrigin, ai.LocationOfOrigin = "", ""
	changed, err := u.edit(ctx, func(cfg *clientcmdapi.Config) bool {
		same := cfg.Clusters[name] != nil && cfg.AuthInfos[name] != nil && cfg.Contexts[name] != nil &&
			cfg.Clusters[name].Server == cl.Server && string(cfg.Clusters[name].CertificateAuthorityData) == string(cl.CertificateAuthorityData) &&
			string(cfg.AuthInfos[name].ClientCertificateData) == string(ai.ClientCertificateData) &&
			cfg.Contexts[name].Cluster == name && cfg.Contexts[name].AuthInfo == name
		if same {
			return false
		}
		cfg.Clusters[name] = cl
		cfg.AuthInfos[name] = ai
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
		cfg.CurrentContext = name
		return true
	})
	if err != nil {
		return phase.Done, fmt.Errorf("write context %s to %s: %w", name, u.Path, err)
	}
	if !changed {
		return phase.Unchanged("context %s in %s unchanged", name, u.Path), nil
	}
	return phase.Changed("context %s in %s (current; the previous file is %s)", name, u.Path, BackupPath(u.Path)), nil
}

// RemoveContext takes ContextName(clusterName) out of the user's
// kubeconfig, with its cluster and user; it reports whether it was there.
func (u User) RemoveContext(ctx context.Context, clusterName string) (bool, error) {
	name := ContextName(clusterName)
	if _, err := os.Stat(u.Path); errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	removed, err := u.edit(ctx, func(cfg *clientcmdapi.Config) bool {
		if cfg.Contexts[name] == nil && cfg.Clusters[name] == nil && cfg.AuthInfos[name] == nil {
			return false
		}
		delete(cfg.Contexts, name)
		delete(cfg.Clusters, name)
		delete(cfg.AuthInfos, name)
		if cfg.CurrentContext == name {
			cfg.CurrentContext = ""
		}
		return true
	})
	if err != nil {
		return false, fmt.Errorf("remove context %s from %s: %w", name, u.Path, err)
	}
	return removed, nil
}

// ContextName is the user's kubeconfig context for a cluster.
func ContextName(name string) string { return "devk-" + name }
