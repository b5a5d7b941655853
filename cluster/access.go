package cluster

import (
	"github.com/devk/devk/cluster/internal/controlplane"
	"github.com/devk/devk/cluster/loadbalancer"
	"github.com/devk/devk/internal/layout"
)

// What the commands' logic packages (cluster/status, cluster/export)
// read of a cluster, which up's and down's phases use unexported.

// AllNodes are every node of the cluster, node 0 first.
func (c *Cluster) AllNodes() ([]Node, error) { return c.nodes() }

// Checks are node n's readiness checks as wait-control-plane runs them:
// its control plane's health, then its Node's readiness ("node").
func (c *Cluster) Checks(n Node) []controlplane.Readiness { return c.checks(n) }

// LoadBalancer is the HAProxy in front of an HA cluster's API servers.
func (c *Cluster) LoadBalancer() loadbalancer.LB { return c.loadBalancer() }

// RegistryPaths is where the embedded registry keeps its pid file, log
// and store, for every cluster of the home.
func (c *Cluster) RegistryPaths() layout.Home { return c.registryPaths() }

// LoopbackRegistries are the registries on the host's loopback the nodes
// pull from (host:port each), each with a forwarder on the bridge.
func (c *Cluster) LoopbackRegistries() []string { return c.loopbackRegistries() }

// NameFlag is the --name flag that names this cluster in a command line
// devk tells the user to run ("" for the default cluster).
func (c *Cluster) NameFlag() string { return c.nameFlag() }

// NoCluster is the error of a command on a cluster that does not exist.
func (c *Cluster) NoCluster() error { return c.noCluster() }

// NodeNamed is the cluster's node called name (node 0 for "").
func (c *Cluster) NodeNamed(name string) (Node, error) { return c.nodeNamed(name) }

// DaemonEnv is what devk's daemons run with (daemonEnv), for what runs
// in a node.
func (c *Cluster) DaemonEnv() []string { return c.daemonEnv() }

// CRISocket is node n's CRI runtime (criSocket).
func (c *Cluster) CRISocket(n Node) string { return c.criSocket(n) }
