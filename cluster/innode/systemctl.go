package innode

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/devk/devk/cluster"
	"github.com/devk/devk/cluster/internal/node"
	"github.com/devk/devk/internal/nodelock"
)

// ServiceOptions name the node whose kubelet devk's systemctl serves:
// the environment `devk node exec` gives a command in the node.
type ServiceOptions struct {
	// Home is $DEVK_HOME ("" for the default), Name the cluster, Node
	// the node.
	Home, Name, Node string
	// Environ is the caller's environment (nodelock.HeldEnv).
	Environ []string
}

// KubeletService is one node's supervised kubelet as the node's init
// system's service: what devk's systemctl starts, stops, restarts and
// shows. Start, Stop and Restart take the node's lock (so that they
// never race a swap or a teardown), unless the caller is a devk that
// holds it (nodelock.AcquireUnlessHeld).
type KubeletService struct {
	c       *cluster.Cluster
	n       node.Node
	environ []string
}

// KubeletState is a node's supervised kubelet now (node.KubeletState).
type KubeletState = node.KubeletState

// OpenKubeletService finds the node o names; it changes nothing.
func OpenKubeletService(o ServiceOptions) (*KubeletService, error) {
	if o.Name == "" || o.Node == "" {
		return nil, errors.New("no cluster or node named: DEVK_CLUSTER and DEVK_NODE are not set")
	}
	c, err := cluster.Open(cluster.Options{Name: o.Name, Home: o.Home})
	if err != nil {
		return nil, err
	}
	if !c.Exists() {
		return nil, c.NoCluster()
	}
	n, err := c.NodeNamed(o.Node)
	if err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("the node's kubelet runs as root: run systemctl as root (devk node exec runs it so)")
	}
	return &KubeletService{c: c, n: n, environ: o.Environ}, nil
}

// Node is the node's name.
func (s *KubeletService) Node() string { return s.n.Name() }

// SystemctlLink is the node's link to devk as systemctl (the same path
// inside the node and out).
func (s *KubeletService) SystemctlLink() string { return s.n.SystemctlLink() }

// State is the node's kubelet now.
func (s *KubeletService) State() KubeletState { return s.n.KubeletState() }

// Start starts the node's kubelet with its files as they are, unless it
// runs. Called by a kubeadm a devk job runs (its lock held), it returns
// once the kubelet is started, as systemd's start of kubeadm's kubelet
// service does: kubeadm waits for the kubelet's health itself, and the
// job watches it for an exit (node.RunKubeadm); called by a user, it
// waits until the kubelet is healthy or has failed, and says why.
func (s *KubeletService) Start(ctx context.Context) error {
	return s.locked(func() error {
		_, _, err := s.n.ServeKubelet(ctx, s.c.DaemonEnv(), s.watched())
		return err
	})
}

// Stop stops the node's kubelet (none running: nothing to do).
func (s *KubeletService) Stop(ctx context.Context) error {
	return s.locked(func() error {
		_, err := s.n.StopKubelet(ctx)
		return err
	})
}

// Restart stops the node's kubelet and starts it again, reading its
// files again (kubeadm's certificates, config and flags); it returns as
// Start does.
func (s *KubeletService) Restart(ctx context.Context) error {
	return s.locked(func() error {
		_, err := s.n.RestartServedKubelet(ctx, s.c.DaemonEnv(), s.watched())
		return err
	})
}

// watched says whether a devk job that holds the node's lock, and so
// watches its kubelet, called.
func (s *KubeletService) watched() bool {
	return nodelock.HeldByCaller(s.environ, s.n.Files.Manifests())
}

// locked runs f under the node's lock (the one a swap of the node or any
// cluster job takes), or under its caller's.
func (s *KubeletService) locked(f func() error) error {
	// The lock and the node's namespaces are the host's: from inside
	// the node's mount namespace neither is the node's.
	if err := s.n.NamespacesVisible(); err != nil {
		return err
	}
	l, err := nodelock.AcquireUnlessHeld(s.environ, s.n.Files.Manifests(), "devk's "+nodelock.Command()+" (node "+s.n.Name()+")")
	if err != nil {
		return fmt.Errorf("node %s: %w", s.n.Name(), err)
	}
	defer l.Release()
	return f()
}
