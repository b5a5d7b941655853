package config

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/devk/devk/internal/layout"
)

// The components a config file passes extraArgs and featureGates to, by
// their keys in the file (and in cluster.json's spec).
const (
	APIServer         = "apiServer"
	ControllerManager = "controllerManager"
	Scheduler         = "scheduler"
	Kubelet           = "kubelet"
	KubeProxy         = "kubeProxy"
)

// SpecComponents are the parts of spec s for each component, by key.
func SpecComponents(s *layout.Spec) map[string]*layout.Component {
	return map[string]*layout.Component{APIServer: &s.APIServer, ControllerManager: &s.ControllerManager,
		Scheduler: &s.Scheduler, Kubelet: &s.Kubelet, KubeProxy: &s.KubeProxy}
}

// Flags devk sets from the spec's own keys (featureGates, runtimeConfig,
// emulatedVersion) and nowhere else: extraArgs may not set them on any
// component.
const (
	FeatureGatesFlag    = "feature-gates"
	RuntimeConfigFlag   = "runtime-config"
	EmulatedVersionFlag = "emulated-version"
)

// specKeyFlags are the flags of the spec's own keys, each with the key
// that sets it.
var specKeyFlags = map[string]string{FeatureGatesFlag: "featureGates", RuntimeConfigFlag: "runtimeConfig", EmulatedVersionFlag: "emulatedVersion"}

// SetBySpecKey says whether flag is one the spec's own keys set
// (featureGates, runtimeConfig, emulatedVersion), never extraArgs.
func SetBySpecKey(flag string) bool {
	_, ok := specKeyFlags[flag]
	return ok
}

// Emulating are the components emulatedVersion applies to, by key: the
// control plane's, which take --emulated-version.
var Emulating = []string{APIServer, ControllerManager, Scheduler}

// OwnedSettings are what devk owns of one component: the settings a
// config file's extraArgs may not set. Validation refuses them
// (validateSpec) and rendering drops them (WithoutOwned), so a
// cluster.json edited by hand cannot hand them over either. A flag devk
// sets that is none of these is a default extraArgs may change; a flag
// devk does not set at all, extraArgs may add.
type OwnedSettings struct {
	// Flags are the flags devk passes on the component's command line
	// from the cluster's layout: every flag whose value is an address,
	// port, name, file or network of the cluster. Rendering sets exactly
	// these, besides FeatureGatesFlag and RuntimeConfigFlag (package
	// cluster's TestOwnedFlagsAreRendered).
	Flags []string
	// ConfigFile are the fields devk writes in the component's config
	// file (the kubelet's, kube-proxy's), by JSON path, each through the
	// flag that overrides it (the kubelet and kube-proxy let a flag win
	// over their file).
	ConfigFile map[string]ConfigField
	// Security are the settings that keep the component closed to the
	// machine's other users and inside the node, whether devk writes
	// them or relies on the component's default, each with why.
	Security map[string]string
}

// ConfigField is the flag that overrides a field of a component's
// config file, and whether extraArgs may change it.
type ConfigField struct {
	// Flag is the command-line flag ("": the component has none).
	Flag string
	// Tunable: devk's value is a default for a throwaway cluster, which
	// extraArgs may change (as a static pod's defaults).
	Tunable bool
}

// Owned is the table of what devk owns of each component, by its key in
// the config file: data that validation and rendering both read.
var Owned = map[string]OwnedSettings{
	APIServer: {
		Flags: []string{"advertise-address", "authorization-mode", "bind-address", "secure-port", "client-ca-file",
			"etcd-cafile", "etcd-certfile", "etcd-keyfile", "etcd-servers",
			"kubelet-client-certificate", "kubelet-client-key", "proxy-client-cert-file", "proxy-client-key-file",
			"requestheader-client-ca-file", "service-account-key-file", "service-account-signing-key-file",
			"service-cluster-ip-range", "tls-cert-file", "tls-private-key-file",
			// the audit log `devk trace` reads (audit.enabled, audit.policyFile)
			"audit-policy-file", "audit-log-path", "audit-log-format"},
		Security: securityFlags[APIServer],
	},
	ControllerManager: {
		Flags: slices.Concat(controllerFlags, []string{"client-ca-file", "cluster-cidr", "cluster-name",
			"cluster-signing-cert-file", "cluster-signing-key-file", "requestheader-client-ca-file", "root-ca-file",
			"service-account-private-key-file", "service-cluster-ip-range"}),
		Security: securityFlags[ControllerManager],
	},
	Scheduler: {Flags: controllerFlags, Security: securityFlags[Scheduler]},
	Kubelet: {
		// bootstrap-kubeconfig: a joined node's (TLS bootstrap).
		Flags:      []string{"config", "kubeconfig", "bootstrap-kubeconfig", "root-dir", "cert-dir", "hostname-override", "node-ip"},
		ConfigFile: kubeletConfigFields,
		Security:   securityFlags[Kubelet],
	},
	KubeProxy: {
		Flags:      []string{"config", "hostname-override"},
		ConfigFile: kubeProxyConfigFields,
		Security:   securityFlags[KubeProxy],
	},
}

// controllerFlags are the flags both controllers, the
// controller-manager and the scheduler, get from the layout: their
// kubeconfigs, where they serve, their serving certificate.
var controllerFlags = []string{"authentication-kubeconfig", "authorization-kubeconfig", "kubeconfig",
	"bind-address", "secure-port", "tls-cert-file", "tls-private-key-file"}

// kubeletConfigFields are the KubeletConfiguration (v1beta1) fields
// the kubelet's config file gets from devk (kubeletconfig.YAML),
// by JSON path, and the kubelet flag bound to each (AddKubeletConfigFlags
// in k8s.io/kubernetes/cmd/kubelet/app/options). A field rendering sets
// must be here: cluster's TestOwnedKubeletConfigFields fails otherwise.
var kubeletConfigFields = map[string]ConfigField{
	"address":                                    {Flag: "address"},
	"port":                                       {Flag: "port"},
	"readOnlyPort":                               {Flag: "read-only-port"},
	"healthzBindAddress":                         {Flag: "healthz-bind-address"},
	"healthzPort":                                {Flag: "healthz-port"},
	"staticPodPath":                              {Flag: "pod-manifest-path"},
	"podLogsDir":                                 {},
	"cgroupDriver":                               {Flag: "cgroup-driver"},
	"cgroupRoot":                                 {Flag: "cgroup-root"},
	"containerRuntimeEndpoint":                   {Flag: "container-runtime-endpoint"},
	"imageServiceEndpoint":                       {Flag: "image-service-endpoint"},
	"authentication.anonymous.enabled":           {Flag: "anonymous-auth"},
	"authentication.webhook.enabled":             {Flag: "authentication-token-webhook"},
	"authentication.webhook.cacheTTL":            {Flag: "authentication-token-webhook-cache-ttl"},
	"authentication.x509.clientCAFile":           {Flag: "client-ca-file"},
	"authorization.mode":                         {Flag: "authorization-mode"},
	"authorization.webhook.cacheAuthorizedTTL":   {Flag: "authorization-webhook-cache-authorized-ttl"},
	"authorization.webhook.cacheUnauthorizedTTL": {Flag: "authorization-webhook-cache-unauthorized-ttl"},
	"clusterDNS":                                 {Flag: "cluster-dns"},
	"clusterDomain":                              {Flag: "cluster-domain"},
	"rotateCertificates":                         {Flag: "rotate-certificates"},
	"resolvConf":                                 {Flag: "resolv-conf"},
	"featureGates":                               {Flag: FeatureGatesFlag},
	"failCgroupV1":                               {Flag: "fail-cgroupv1", Tunable: true},
	"failSwapOn":                                 {Flag: "fail-swap-on", Tunable: true},
	"fileCheckFrequency":                         {Flag: "file-check-frequency", Tunable: true},
	"syncFrequency":                              {Flag: "sync-frequency", Tunable: true},
	"nodeStatusReportFrequency":                  {Tunable: true},
	"evictionHard":                               {Flag: "eviction-hard", Tunable: true},
	"serializeImagePulls":                        {Flag: "serialize-image-pulls", Tunable: true},
	"imageGCHighThresholdPercent":                {Flag: "image-gc-high-threshold", Tunable: true},
	"imageGCLowThresholdPercent":                 {Flag: "image-gc-low-threshold", Tunable: true},
}

// kubeProxyConfigFields are the KubeProxyConfiguration (v1alpha1)
// fields devk sets in kube-proxy's config file, by JSON path, and
// kube-proxy's flag for each (cluster's TestOwnedKubeProxyConfigFields
// keeps it whole). Conntrack's are devk's: they are the host's own
// sysctls.
var kubeProxyConfigFields = map[string]ConfigField{
	"clientConnection.kubeconfig":     {Flag: "kubeconfig"},
	"bindAddress":                     {Flag: "bind-address"},
	"mode":                            {Flag: "proxy-mode"},
	"clusterCIDR":                     {Flag: "cluster-cidr"},
	"featureGates":                    {Flag: FeatureGatesFlag},
	"conntrack.maxPerCore":            {Flag: "conntrack-max-per-core"},
	"conntrack.min":                   {Flag: "conntrack-min"},
	"conntrack.tcpEstablishedTimeout": {Flag: "conntrack-tcp-timeout-established"},
	"conntrack.tcpCloseWaitTimeout":   {Flag: "conntrack-tcp-timeout-close-wait"},
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
	Kubelet: {
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
	APIServer: {
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
	ControllerManager: controllerSecurityFlags("controller-manager"),
	Scheduler:         controllerSecurityFlags("scheduler"),
	KubeProxy: {
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

// ownFlags are, for each component (keyed as in the config file), the
// flags extraArgs may not set, each with why (a sentence that starts
// with "devk sets" or "devk owns"): Owned's three kinds in one map, the
// first to name a flag giving its reason.
var ownFlags = sync.OnceValue(func() map[string]map[string]string {
	const layoutWhy = "devk sets --%s from the cluster's layout, and a config file may not change it: devk owns every flag whose value is an address, port, name, file or network of the cluster"
	out := map[string]map[string]string{}
	for comp, owned := range Owned {
		own := map[string]string{}
		add := func(flag, why string) {
			if _, ok := own[flag]; !ok {
				own[flag] = why
			}
		}
		for flag, why := range owned.Security {
			add(flag, fmt.Sprintf("devk owns --%s: %s", flag, why))
		}
		for _, flag := range owned.Flags {
			add(flag, fmt.Sprintf(layoutWhy, flag))
		}
		for path, f := range owned.ConfigFile {
			if f.Flag != "" && !f.Tunable {
				add(f.Flag, fmt.Sprintf("devk sets %s in the %s's config file, and --%s would override it", path, configFileOf[comp], f.Flag))
			}
		}
		out[comp] = own
	}
	return out
})

// configFileOf names the component whose config file devk writes.
var configFileOf = map[string]string{Kubelet: "kubelet", KubeProxy: "kube-proxy"}

// WithoutOwned is extraArgs of component comp (keyed as in the config
// file) without the flags devk owns or sets from the spec's own keys:
// what rendering passes on. Validation has refused them already; this
// keeps a hand-edited cluster.json from getting them through.
func WithoutOwned(comp string, extraArgs map[string]string) map[string]string {
	out := maps.Clone(extraArgs)
	own := ownFlags()[comp]
	maps.DeleteFunc(out, func(flag, _ string) bool {
		_, ok := own[flag]
		return ok || SetBySpecKey(flag)
	})
	return out
}

// SpecFlags are the flags spec s sets on component comp (keyed as in the
// config file) through its own keys, not extraArgs: FeatureGatesFlag
// (the spec's gates with comp's over them), for the API server
// RuntimeConfigFlag, and for those Emulating EmulatedVersionFlag; each
// value sorted by key. None when it sets none.
func SpecFlags(s layout.Spec, comp string) map[string]string {
	out := map[string]string{}
	if c, ok := SpecComponents(&s)[comp]; ok {
		if g := s.Gates(*c); len(g) > 0 {
			pairs := make(map[string]string, len(g))
			for k, v := range g {
				pairs[k] = strconv.FormatBool(v)
			}
			out[FeatureGatesFlag] = pairsFlag(pairs)
		}
	}
	if comp == APIServer && len(s.RuntimeConfig) > 0 {
		out[RuntimeConfigFlag] = pairsFlag(s.RuntimeConfig)
	}
	if s.EmulatedVersion != "" && slices.Contains(Emulating, comp) {
		out[EmulatedVersionFlag] = s.EmulatedVersion
	}
	return out
}

// pairsFlag is a key=value,… flag value, sorted by key.
func pairsFlag(m map[string]string) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, k+"="+m[k])
	}
	return strings.Join(out, ",")
}
