// Package kubeletconfig renders a node's kubelet: its
// KubeletConfiguration file and the flags devk owns (files, names,
// addresses; config.Owned lists them) beside the defaults a config
// file's kubelet.extraArgs may change. cluster's kubelet-start phase
// writes and runs what it renders.
package kubeletconfig

import (
	"maps"

	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/pki"
)

// Input is what the kubelet's config depends on.
type Input struct {
	Config layout.Config
	// Node is the node the kubelet runs; Files are its files.
	Node  layout.NodeNet
	Files layout.NodeFiles
	// CRISocket is the runtime's unix socket path.
	CRISocket string
}

// YAML renders the KubeletConfiguration of a node devk bootstraps:
// Shared's settings, the node's static pod dir, logs and runtime socket,
// webhook authn/authz as kubeadm, and every port on the node's address.
func YAML(in Input) ([]byte, error) {
	cfg, p, n := in.Config, in.Files, in.Node
	m := Shared(cfg.Spec)
	maps.Copy(m, map[string]any{
		"apiVersion":               APIVersion,
		"kind":                     Kind,
		"address":                  n.IP,
		"port":                     cfg.Ports.Kubelet,
		"readOnlyPort":             0,
		"healthzBindAddress":       n.IP,
		"healthzPort":              cfg.Ports.KubeletHealthz,
		"staticPodPath":            p.Manifests(),
		"podLogsDir":               p.PodLogs(),
		"containerRuntimeEndpoint": "unix://" + in.CRISocket,
		"imageServiceEndpoint":     "unix://" + in.CRISocket,
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true, "cacheTTL": "0s"},
			"x509":      map[string]any{"clientCAFile": pki.CertPath(p.PKI(), "ca")},
		},
		"authorization": map[string]any{
			"mode":    "Webhook",
			"webhook": map[string]any{"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"},
		},
		"clusterDNS":         []string{cfg.DNSIP()},
		"clusterDomain":      cfg.DNSDomain,
		"rotateCertificates": true,
	})
	if n.CgroupRoot != "" {
		m["cgroupRoot"] = n.CgroupRoot
	}
	return yaml.Marshal(m)
}

// The KubeletConfiguration's apiVersion and kind.
const (
	APIVersion = "kubelet.config.k8s.io/v1beta1"
	Kind       = "KubeletConfiguration"
)

// Shared are the KubeletConfiguration fields of every kubelet devk
// starts, whoever writes the rest of its file (YAML for a node devk
// bootstraps, kubeadm from cluster/internal/kubeadmconfig's config):
// none a path, port or address of one node. cgroupfs (no systemd),
// failCgroupV1 false (these machines run cgroup v1; from 1.35 the
// kubelet refuses v1 unless told), no swap check, the host's
// resolv.conf, a throwaway cluster's eviction and image GC thresholds,
// parallel pulls and quick syncs, and spec's kubelet feature gates.
func Shared(spec layout.Spec) map[string]any {
	m := map[string]any{
		"cgroupDriver": "cgroupfs",
		"failCgroupV1": false,
		"failSwapOn":   false,
		"resolvConf":   "/etc/resolv.conf",
		// Static pods are picked up by inotify; the periodic scan is the
		// fallback.
		"fileCheckFrequency":        "5s",
		"syncFrequency":             "10s",
		"nodeStatusReportFrequency": "10s",
		// A shared laptop disk is often fuller than the kubelet's defaults
		// like; a throwaway cluster should not evict its control plane.
		"evictionHard": map[string]string{
			"memory.available":  "100Mi",
			"nodefs.available":  "1%",
			"nodefs.inodesFree": "1%",
			"imagefs.available": "1%",
		},
		// The four control-plane images are pulled at once, not in turn.
		"serializeImagePulls":         false,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
	}
	if g := spec.Gates(spec.Kubelet); len(g) > 0 {
		m["featureGates"] = g
	}
	return m
}

// BootstrapKubeconfig is the kubeconfig a joining node's kubelet makes
// its first request with (kubeadm's bootstrap-kubelet.conf): the
// bootstrap token, for TLS bootstrap.
const BootstrapKubeconfig = "bootstrap-kubelet"

// Flags are the kubelet's flags, split as the control plane's are: devk's
// own (files, names, addresses; config.Owned lists them) and the defaults
// a config file's kubelet.extraArgs may change. Its feature gates are in
// its config file. n is the node it runs, p its files; a node that joined
// (any but node 0, whose credential devk issues) gets its client
// certificate by TLS bootstrap.
func Flags(cfg layout.Config, p layout.NodeFiles, n layout.NodeNet) (own, defaults map[string]string) {
	own = map[string]string{
		"config":            p.KubeletConfig(),
		"kubeconfig":        p.Kubeconfig("kubelet"),
		"root-dir":          p.KubeletRoot(),
		"cert-dir":          p.KubeletPKI(),
		"hostname-override": n.Name,
		"node-ip":           n.IP,
	}
	if n.Name != cfg.FirstNode().Name {
		own["bootstrap-kubeconfig"] = p.Kubeconfig(BootstrapKubeconfig)
	}
	return own, map[string]string{"v": "1"}
}
