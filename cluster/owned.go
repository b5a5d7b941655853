package cluster

import (
	"fmt"
	"maps"
	"sync"

	"github.com/devk/devk/internal/layout"
)

// What devk owns of each component a config file passes extraArgs to:
// the flags extraArgs may not set, each with why. Validation refuses
// them (validateSpec) and rendering drops them (withoutOwned), so a
// cluster.json edited by hand cannot hand them over either. Three
// sources, one list (the first to name a flag gives its reason):
//
//   - settings devk relies on, whether it writes them or leaves the
//     component's default: who may use a component's API, where it
//     listens, where its state and cgroups go (securityFlags);
//   - the flags devk passes on the command line from the cluster's
//     layout (podSpec.args, kubeletFlags' own, kubeProxyFlags);
//   - the fields devk writes in a component's config file, through the
//     flag that overrides each (the kubelet and kube-proxy let a flag win
//     over their file): kubeletConfigFlags, kubeProxyConfigFlags.

// configFlag is the flag that overrides a field of a component's config
// file, and whether extraArgs may change it.
type configFlag struct {
	// flag is the command-line flag ("": the component has none).
	flag string
	// tunable: devk's value is a default for a throwaway cluster,
	// which extraArgs may change (as podSpec.defaults).
	tunable bool
}

// kubeletConfigFlags are the KubeletConfiguration (v1beta1) fields
// KubeletConfigYAML writes, by JSON path, and the kubelet flag bound to
// each (AddKubeletConfigFlags in k8s.io/kubernetes/cmd/kubelet/app/options).
// A field rendering sets must be here: TestOwnedKubeletConfigFields
// fails otherwise.
var kubeletConfigFlags = map[string]configFlag{
	"address":                                    {flag: "address"},
	"port":                                       {flag: "port"},
	"readOnlyPort":                               {flag: "read-only-port"},
	"healthzBindAddress":                         {flag: "healthz-bind-address"},
	"healthzPort":                                {flag: "healthz-port"},
	"staticPodPath":                              {flag: "pod-manifest-path"},
	"podLogsDir":                                 {},
	"cgroupDriver":                               {flag: "cgroup-driver"},
	"cgroupRoot":                                 {flag: "cgroup-root"},
	"containerRuntimeEndpoint":                   {flag: "container-runtime-endpoint"},
	"imageServiceEndpoint":                       {flag: "image-service-endpoint"},
	"authentication.anonymous.enabled":           {flag: "anonymous-auth"},
	"authentication.webhook.enabled":             {flag: "authentication-token-webhook"},
	"authentication.webhook.cacheTTL":            {flag: "authentication-token-webhook-cache-ttl"},
	"authentication.x509.clientCAFile":           {flag: "client-ca-file"},
	"authorization.mode":                         {flag: "authorization-mode"},
	"authorization.webhook.cacheAuthorizedTTL":   {flag: "authorization-webhook-cache-authorized-ttl"},
	"authorization.webhook.cacheUnauthorizedTTL": {flag: "authorization-webhook-cache-unauthorized-ttl"},
	"clusterDNS":                                 {flag: "cluster-dns"},
	"clusterDomain":                              {flag: "cluster-domain"},
	"rotateCertificates":                         {flag: "rotate-certificates"},
	"resolvConf":                                 {flag: "resolv-conf"},
	"featureGates":                               {flag: featureGatesFlag},
	"failCgroupV1":                               {flag: "fail-cgroupv1", tunable: true},
	"failSwapOn":                                 {flag: "fail-swap-on", tunable: true},
	"fileCheckFrequency":                         {flag: "file-check-frequency", tunable: true},
	"syncFrequency":                              {flag: "sync-frequency", tunable: true},
	"nodeStatusReportFrequency":                  {tunable: true},
	"evictionHard":                               {flag: "eviction-hard", tunable: true},
	"serializeImagePulls":                        {flag: "serialize-image-pulls", tunable: true},
	"imageGCHighThresholdPercent":                {flag: "image-gc-high-threshold", tunable: true},
	"imageGCLowThresholdPercent":                 {flag: "image-gc-low-threshold", tunable: true},
}

// kubeProxyConfigFlags are the KubeProxyConfiguration (v1alpha1) fields
// kubeProxyConfigYAML sets, by JSON path, and kube-proxy's flag for
// each (TestOwnedKubeProxyConfigFields keeps it whole). Conntrack's are
// devk's: they are the host's own sysctls.
var kubeProxyConfigFlags = map[string]configFlag{
	"clientConnection.kubeconfig":     {flag: "kubeconfig"},
	"bindAddress":                     {flag: "bind-address"},
	"mode":                            {flag: "proxy-mode"},
	"clusterCIDR":                     {flag: "cluster-cidr"},
	"featureGates":                    {flag: featureGatesFlag},
	"conntrack.maxPerCore":            {flag: "conntrack-max-per-core"},
	"conntrack.min":                   {flag: "conntrack-min"},
	"conntrack.tcpEstablishedTimeout": {flag: "conntrack-tcp-timeout-established"},
	"conntrack.tcpCloseWaitTimeout":   {flag: "conntrack-tcp-timeout-close-wait"},
}

// Why devk keeps a setting it does not write itself.
const (
	whyAuth       = "it decides who may use the %s's API, which devk keeps to the cluster's own certificates and tokens (otherwise every user of this machine could %s)"
	whyListen     = "it decides where the %s listens, which devk keeps to the node's own address"
	whyContain    = "it would put the %s's state, pods or cgroups outside the node's own (on the host's, where down does not remove them)"
	whyIdentity   = "devk gives the %s its certificates and files"
	whyInsecure   = "it opens the %s's insecure, unauthenticated port"
	apiServerWhat = "take over the whole cluster and, through privileged pods, the machine"
	kubeletWhat   = "run commands in any of the node's pods"
)

// securityFlags are, per component, the settings that keep it closed
// to the machine's other users and inside the node, whether devk writes
// them or relies on the component's default.
var securityFlags = map[string]map[string]string{
	"kubelet": {
		"anonymous-auth":               fmt.Sprintf(whyAuth, "kubelet", kubeletWhat),
		"authorization-mode":           fmt.Sprintf(whyAuth, "kubelet", kubeletWhat),
		"authentication-token-webhook": fmt.Sprintf(whyAuth, "kubelet", kubeletWhat),
		"client-ca-file":               fmt.Sprintf(whyAuth, "kubelet", kubeletWhat),
		"read-only-port":               fmt.Sprintf(whyInsecure, "kubelet"),
		"address":                      fmt.Sprintf(whyListen, "kubelet"),
		"healthz-bind-address":         fmt.Sprintf(whyListen, "kubelet"),
		"tls-cert-file":                fmt.Sprintf(whyIdentity, "kubelet"),
		"tls-private-key-file":         fmt.Sprintf(whyIdentity, "kubelet"),
		"rotate-server-certificates":   fmt.Sprintf(whyIdentity, "kubelet"),
		"config-dir":                   "its drop-in files would override the config file devk writes, every setting on this list included",
		"manifest-url":                 fmt.Sprintf(whyContain, "kubelet"),
		"manifest-url-header":          fmt.Sprintf(whyContain, "kubelet"),
		"kubelet-cgroups":              fmt.Sprintf(whyContain, "kubelet"),
		"system-cgroups":               fmt.Sprintf(whyContain, "kubelet"),
		"runtime-cgroups":              fmt.Sprintf(whyContain, "kubelet"),
		"kube-reserved-cgroup":         fmt.Sprintf(whyContain, "kubelet"),
		"system-reserved-cgroup":       fmt.Sprintf(whyContain, "kubelet"),
		"volume-plugin-dir":            fmt.Sprintf(whyContain, "kubelet"),
		"lock-file":                    fmt.Sprintf(whyContain, "kubelet"),
		"exit-on-lock-contention":      fmt.Sprintf(whyContain, "kubelet"),
		"experimental-mounter-path":    fmt.Sprintf(whyContain, "kubelet"),
	},
	"apiServer": {
		"anonymous-auth":                    fmt.Sprintf(whyAuth, "API server", apiServerWhat),
		"authorization-mode":                fmt.Sprintf(whyAuth, "API server", apiServerWhat),
		"authorization-config":              fmt.Sprintf(whyAuth, "API server", apiServerWhat),
		"authorization-policy-file":         fmt.Sprintf(whyAuth, "API server", apiServerWhat),
		"authorization-webhook-config-file": fmt.Sprintf(whyAuth, "API server", apiServerWhat),
		"authentication-config":             fmt.Sprintf(whyAuth, "API server", apiServerWhat),
		"token-auth-file":                   fmt.Sprintf(whyAuth, "API server", apiServerWhat),
		// The insecure port's flags went in 1.24; a tree older than that
		// still has them.
		"insecure-port":         fmt.Sprintf(whyInsecure, "API server"),
		"insecure-bind-address": fmt.Sprintf(whyInsecure, "API server"),
		"port":                  fmt.Sprintf(whyInsecure, "API server"),
		"address":               fmt.Sprintf(whyInsecure, "API server"),
	},
	"controllerManager": controllerSecurityFlags("controller-manager"),
	"scheduler":         controllerSecurityFlags("scheduler"),
	"kubeProxy": {
		"metrics-bind-address": fmt.Sprintf(whyListen, "kube-proxy"),
		"healthz-bind-address": fmt.Sprintf(whyListen, "kube-proxy"),
		"master":               "devk points kube-proxy at the cluster's API server",
	},
}

func controllerSecurityFlags(name string) map[string]string {
	return map[string]string{
		"authorization-always-allow-paths": fmt.Sprintf(whyAuth, name, "read what its unauthenticated paths serve"),
		// Gone in 1.24, as the API server's.
		"port":    fmt.Sprintf(whyInsecure, name),
		"address": fmt.Sprintf(whyInsecure, name),
	}
}

// ownFlags are, for each component of the spec (keyed as in the config
// file), the flags extraArgs may not set, each with why (a sentence
// that starts with "devk sets" or "it").
var ownFlags = sync.OnceValue(func() map[string]map[string]string {
	const layoutWhy = "devk sets --%s from the cluster's layout, and a config file may not change it: devk owns every flag whose value is an address, port, name, file or network of the cluster"
	in := ManifestInput{Config: layout.NewConfig(layout.DefaultName), Paths: layout.ClusterPaths("/", layout.DefaultName)}
	// A joined node's kubelet has every flag node 0's has, and its
	// bootstrap kubeconfig.
	kubelet, _ := kubeletFlags(in.Config, in.Paths, layout.NodeNet{Name: in.Config.Name + "-worker", IP: in.Config.AdvertiseIP})
	out := map[string]map[string]string{}
	add := func(comp, flag, why string) {
		if out[comp] == nil {
			out[comp] = map[string]string{}
		}
		if _, ok := out[comp][flag]; !ok {
			out[comp][flag] = why
		}
	}
	for comp, flags := range securityFlags {
		for flag, why := range flags {
			add(comp, flag, fmt.Sprintf("devk owns --%s: %s", flag, why))
		}
	}
	for comp, flags := range map[string]map[string]string{
		"apiServer":         apiserverPod(in).args,
		"controllerManager": controllerManagerPod(in).args,
		"scheduler":         schedulerPod(in).args,
		"kubelet":           kubelet,
		"kubeProxy":         kubeProxyFlags(),
	} {
		for flag := range flags {
			add(comp, flag, fmt.Sprintf(layoutWhy, flag))
		}
	}
	for _, file := range []struct {
		comp, name string
		fields     map[string]configFlag
	}{{"kubelet", "kubelet", kubeletConfigFlags}, {"kubeProxy", "kube-proxy", kubeProxyConfigFlags}} {
		for path, f := range file.fields {
			if f.flag != "" && !f.tunable {
				add(file.comp, f.flag, fmt.Sprintf("devk sets %s in the %s's config file, and --%s would override it", path, file.name, f.flag))
			}
		}
	}
	return out
})

// withoutOwned is extraArgs of the spec's component comp without the
// flags devk owns: what rendering passes on (validation has refused
// them already; this keeps a hand-edited cluster.json from getting
// them through).
func withoutOwned(comp string, extraArgs map[string]string) map[string]string {
	out := maps.Clone(extraArgs)
	own := ownFlags()[comp]
	maps.DeleteFunc(out, func(flag, _ string) bool { _, ok := own[flag]; return ok })
	return out
}
