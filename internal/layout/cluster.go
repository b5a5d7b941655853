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

	"github.com/devk/devk/internal/supervise"
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

// ClusterPaths is where the cluster name under the resolved home keeps
// its things.
func ClusterPaths(home, name string) NodeFiles {
	return NodeFiles{Dir: filepath.Join(home, "clusters", name)}
}

// HomePaths is where devk keeps what its clusters share under the
// resolved home: the embedded registry's storage, pid file and log.
func HomePaths(home string) NodeFiles { return NodeFiles{Dir: home} }

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
		if cfg, err := ReadConfig(ClusterPaths(home, name).ConfigFile()); err == nil {
			out = append(out, cfg)
		}
	}
	return out
}

// Open reads the config of an existing cluster. home is as HomeDir takes
// it (empty: $DEVK_HOME, else ~/.devk) and name defaults to DefaultName.
// A cluster that does not exist is a *NoClusterError.
func Open(home, name string) (Config, NodeFiles, error) {
	if name == "" {
		name = DefaultName
	}
	if err := ValidateName(name); err != nil {
		return Config{}, NodeFiles{}, err
	}
	h, err := HomeDir(home)
	if err != nil {
		return Config{}, NodeFiles{}, err
	}
	p := ClusterPaths(h, name)
	cfg, err := ReadConfig(p.ConfigFile())
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, p, NoCluster(h, name)
	}
	return cfg, p, err
}

// ManifestPath is a static pod's manifest file.
func (p NodeFiles) ManifestPath(podName string) string {
	return filepath.Join(p.Manifests(), podName+".yaml")
}

// PIDFile is where a supervised process's pid and start time are recorded.
func (p NodeFiles) PIDFile(name string) string { return filepath.Join(p.Run(), name+".pid") }

// LogFile is where a supervised process's output goes.
func (p NodeFiles) LogFile(name string) string { return filepath.Join(p.Logs(), name+".log") }

// EtcdURL is the client URL of the cluster's etcd.
func (c Config) EtcdURL() string {
	return "https://" + net.JoinHostPort(c.AdvertiseIP, strconv.Itoa(c.Ports.EtcdClient))
}

// Node is the node of a devk cluster, laid out as Node describes.
func (p NodeFiles) Node(c Config) Node {
	return Node{
		ManifestsDir:   p.Manifests(),
		PKIDir:         p.PKI(),
		Kubeconfig:     p.Kubeconfig("admin"),
		CRISocket:      c.CRISocket,
		KubeletRootDir: p.KubeletRoot(),
		EtcdURL:        c.EtcdURL(),
		NetNS:          c.NodeNetNS(c.NodeName),
	}
}

// Procs is where the processes devk supervises for this directory keep
// their pid files (run/<name>.pid) and logs (logs/<name>.log).
func (p NodeFiles) Procs() supervise.Dir {
	return supervise.Dir{PIDFile: p.PIDFile, LogFile: p.LogFile, Work: p.Dir}
}
