package cluster

import (
	"time"
)

// How long up and down wait for what, and how often they look: every
// default once, here.
const (
	// DefaultWaitTimeout bounds wait-control-plane when --wait is not given.
	DefaultWaitTimeout = 4 * time.Minute
	// controlPlanePollInterval is how often wait-control-plane checks.
	controlPlanePollInterval = 250 * time.Millisecond

	// containerdStartTimeout bounds the wait for a started containerd's
	// CRI to answer (it takes a second or so).
	containerdStartTimeout = 30 * time.Second
	containerdPollInterval = 100 * time.Millisecond

	// kubeletFailFastWindow is how long kubelet-start watches a kubelet it
	// started: one with a bad config exits within it.
	kubeletFailFastWindow = 1500 * time.Millisecond
	kubeletPollInterval   = 100 * time.Millisecond
	// relistTimeout bounds RelistKubelet's wait for the restarted kubelet
	// to be healthy and watch the API server.
	relistTimeout      = 15 * time.Second
	relistPollInterval = 50 * time.Millisecond

	// restartGrace is how long a kubelet or containerd whose binary or
	// config changed gets to stop before it is killed.
	restartGrace = 10 * time.Second
	// leftoverGrace is a process's left in the cluster's cgroups.
	leftoverGrace = time.Second

	// statusCheckTimeout bounds each of status's health checks, its read
	// of kube-system's pods, and its look at each node's runtime.
	statusCheckTimeout = 3 * time.Second
	// exportRequestTimeout bounds each API request of export logs (a
	// list of one resource in all namespaces).
	exportRequestTimeout = 10 * time.Second
	// apiRequestTimeout bounds each API request of up: the API server
	// is fresh and the machine busy starting the rest.
	apiRequestTimeout = 10 * time.Second

	// addonWaitTimeout bounds addon/wait: the addons' images come from
	// the local registry, so their pods start within seconds.
	addonWaitTimeout  = 2 * time.Minute
	addonPollInterval = 250 * time.Millisecond

	// podCIDRTimeout bounds the wait for the controller-manager to give a
	// registered Node its pod subnet (it does within a second).
	podCIDRTimeout      = time.Minute
	podCIDRPollInterval = 250 * time.Millisecond
)
