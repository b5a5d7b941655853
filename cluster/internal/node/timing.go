package node

import "time"

// How long a node's work waits for what, and how often it looks.
const (
	// containerdStartTimeout bounds the wait for a started containerd's
	// CRI to answer (it takes a second or so).
	containerdStartTimeout = 30 * time.Second
	containerdPollInterval = 100 * time.Millisecond

	// kubeletFailFastWindow is how long kubelet-start watches a kubelet it
	// started: one with a bad config exits within it.
	kubeletFailFastWindow = 1500 * time.Millisecond
	kubeletPollInterval   = 100 * time.Millisecond
	// kubeletWatchInterval is how often a kubeadm init or join looks
	// whether the node's kubelet exited.
	kubeletWatchInterval = 500 * time.Millisecond
	// relistTimeout bounds RelistKubelet's wait for the restarted kubelet
	// to be healthy and watch the API server.
	relistTimeout      = 15 * time.Second
	relistPollInterval = 50 * time.Millisecond

	// restartGrace is how long a kubelet or containerd whose binary or
	// config changed gets to stop before it is killed.
	restartGrace = 10 * time.Second
	// LeftoverGrace is a process's left in the node's namespaces or the
	// cluster's cgroups.
	LeftoverGrace = time.Second

	// podCIDRTimeout bounds the wait for the controller-manager to give a
	// registered Node its pod subnet (it does within a second).
	podCIDRTimeout      = time.Minute
	podCIDRPollInterval = 250 * time.Millisecond
)
