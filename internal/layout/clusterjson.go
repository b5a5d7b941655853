package layout

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
)

// cluster.json's versions. Every cluster.json devk writes is headed by
// ConfigAPIVersion and ConfigKind (EncodeConfig); ParseConfig reads
// every earlier shape through migrate into today's Config, so the code
// after it sees one shape only. A change to what cluster.json holds
// gets a new ConfigAPIVersion, and migrate learns the one before it.
//
// This lives beside Config, not in a package of its own: Config is
// layout's type (Open and Configs read it, ClusterFiles.Node takes it), and a
// package below layout would have to take the type with it.
const (
	// ConfigGroup is the API group of devk's files: the config file
	// (`devk up --config`) and cluster.json.
	ConfigGroup = "devk.dev"
	// ConfigAPIVersion is the version of cluster.json this devk writes,
	// the newest it reads.
	ConfigAPIVersion = ConfigGroup + "/v1alpha2"
	// configV1alpha1 is the version before: the same with nodeName and
	// advertiseIP, node 0's name and address again beside
	// network.nodes[0] (read, and dropped).
	configV1alpha1 = ConfigGroup + "/v1alpha1"
	// ConfigKind is cluster.json's kind: what devk knows of a cluster it
	// made (the config file's kind is Cluster).
	ConfigKind = "ClusterState"
)

// configHeader is what tells cluster.json's versions apart.
type configHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// configDocument is cluster.json as this devk writes it.
type configDocument struct {
	configHeader
	Config
}

// EncodeConfig is cluster.json for c, as this devk writes it: headed by
// ConfigAPIVersion and ConfigKind, indented, ending in a newline.
func EncodeConfig(c Config) ([]byte, error) {
	data, err := json.MarshalIndent(configDocument{configHeader{ConfigAPIVersion, ConfigKind}, c}, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// decodeConfig reads cluster.json of any version this devk knows into
// today's Config (unvalidated): an unversioned file, as devk wrote it
// before cluster.json had a version, goes through migrate; a version it
// does not know is refused, saying what to do.
func decodeConfig(data []byte) (Config, error) {
	notDevk := func(err error) error {
		return fmt.Errorf("not a devk cluster config (%v): restore it, or remove the cluster by hand", err)
	}
	var h configHeader
	if err := json.Unmarshal(data, &h); err != nil {
		return Config{}, notDevk(err)
	}
	switch {
	case h == configHeader{}:
		var c Config
		if err := json.Unmarshal(data, &c); err != nil {
			return Config{}, notDevk(err)
		}
		return c, migrate(data, &c)
	case (h.APIVersion == ConfigAPIVersion || h.APIVersion == configV1alpha1) && h.Kind == ConfigKind:
		var d configDocument
		if err := json.Unmarshal(data, &d); err != nil {
			return Config{}, notDevk(err)
		}
		return d.Config, nil
	case h.APIVersion == ConfigAPIVersion || h.APIVersion == configV1alpha1:
		return Config{}, fmt.Errorf("kind is %q, want %s: the file is not a devk cluster.json (a config file for `devk up --config` is kind Cluster); restore it, or remove the cluster by hand", h.Kind, ConfigKind)
	case strings.HasPrefix(h.APIVersion, ConfigGroup+"/"):
		return Config{}, fmt.Errorf("apiVersion is %s: a newer devk made or changed this cluster, and this devk reads up to %s; run the devk that wrote it (or a newer one), which knows the cluster", h.APIVersion, ConfigAPIVersion)
	default:
		return Config{}, fmt.Errorf("apiVersion is %q, want %s: the file is not devk's; restore it, or remove the cluster by hand", h.APIVersion, ConfigAPIVersion)
	}
}

// migrate turns a cluster.json written before it had a version into
// today's shape: the one place that knows devk's earlier shapes.
//
//   - Before nodes had their own network namespace (devk of 2026-11-29
//     and 30) there was no network: node 0 shared the host's network and
//     listened on its loopback (advertiseIP). No such cluster can be
//     converted (its certificates, manifests and running daemons name
//     the loopback), and today's up, down and node commands know only
//     nodes in namespaces: it is refused, saying how to remove it.
//   - Before nodes had roles and cgroup roots (to 2026-12-01), the one
//     node was the control plane, in the cluster's cgroup root.
//
// Its nodeName and advertiseIP (node 0's, dropped in v1alpha2) are read
// only to name such a cluster.
func migrate(data []byte, c *Config) error {
	var old struct {
		AdvertiseIP string `json:"advertiseIP"`
	}
	_ = json.Unmarshal(data, &old)
	if ip := net.ParseIP(old.AdvertiseIP); c.Network.Subnet == "" && ip != nil && ip.IsLoopback() {
		return fmt.Errorf("cluster %s was made by a devk from before nodes had their own network namespace (it has no network; its node shares the host's at %s), which this devk can neither run nor take down: "+
			"take it down with the devk that made it, or by hand (stop the processes the run/*.pid files beside cluster.json name, delete the pods' bridge cluster.json names with `ip link del`, unmount what is mounted under the cluster's directory and remove it); then `devk up` makes a new one", c.Name, old.AdvertiseIP)
	}
	if len(c.Network.Nodes) > 0 {
		n0 := &c.Network.Nodes[0]
		if n0.Role == "" {
			n0.Role = RoleControlPlane
		}
		if n0.CgroupRoot == "" {
			n0.CgroupRoot = c.CgroupRoot
		}
	}
	return nil
}
