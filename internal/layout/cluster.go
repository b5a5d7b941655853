package layout

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// ErrNoCluster is what Open's error is (errors.Is) when the cluster does
// not exist.
var ErrNoCluster = errors.New("no such cluster")

// NoClusterError says a cluster does not exist, and which do.
type NoClusterError struct {
	Home, Name string
	// Others are the clusters that do exist under Home.
	Others []string
}

func (e *NoClusterError) Error() string {
	if len(e.Others) == 0 {
		return fmt.Sprintf("no devk cluster %q in %s (there are none; `devk up` makes one)", e.Name, e.Home)
	}
	return fmt.Sprintf("no devk cluster %q in %s; there are: %s (pass --name)", e.Name, e.Home, strings.Join(e.Others, ", "))
}

// Is makes errors.Is(err, ErrNoCluster) true.
func (e *NoClusterError) Is(target error) bool { return target == ErrNoCluster }

// NoCluster is the error of a command on cluster name under the resolved
// home, which does not exist.
func NoCluster(home, name string) *NoClusterError {
	return &NoClusterError{Home: home, Name: name, Others: Clusters(home)}
}

// Clusters lists the clusters under the resolved home, sorted.
func Clusters(home string) []string {
	files, _ := filepath.Glob(filepath.Join(home, "clusters", "*", "cluster.json"))
	var out []string
	for _, f := range files {
		out = append(out, filepath.Base(filepath.Dir(f)))
	}
	sort.Strings(out)
	return out
}

// Configs are the valid configs of the clusters under the resolved home
// but except.
func Configs(home, except string) []Config {
	var out []Config
	for _, name := range Clusters(home) {
		if name == except {
			continue
		}
		if cfg, err := ReadConfig(HomeFiles(home).Cluster(name).ConfigFile()); err == nil {
			out = append(out, cfg)
		}
	}
	return out
}

// Open reads the config of an existing cluster. home is as HomeDir takes
// it (empty: $DEVK_HOME, else ~/.devk) and name defaults to DefaultName.
// A cluster that does not exist is a *NoClusterError.
func Open(home, name string) (Config, ClusterFiles, error) {
	if name == "" {
		name = DefaultName
	}
	if err := ValidateName(name); err != nil {
		return Config{}, ClusterFiles{}, err
	}
	h, err := HomeDir(home)
	if err != nil {
		return Config{}, ClusterFiles{}, err
	}
	p := HomeFiles(h).Cluster(name)
	cfg, err := ReadConfig(p.ConfigFile())
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, p, NoCluster(h, name)
	}
	return cfg, p, err
}

// NodeEtcdURL is the client URL of control-plane node n's etcd member.
func (c Config) NodeEtcdURL(n NodeNet) string {
	return "https://" + net.JoinHostPort(n.IP, strconv.Itoa(c.Ports.EtcdClient))
}

// NodeCRISocket is the runtime of node n, whose files are p: node 0's is
// the cluster's CRISocket (devk's containerd, or one the user runs), every
// other node's its own containerd's.
func (c Config) NodeCRISocket(n NodeNet, p NodeFiles) string {
	if len(c.Network.Nodes) == 0 || n.Name == c.FirstNode().Name {
		return c.CRISocket
	}
	return p.ContainerdSocket()
}
