package kubeadmconfig

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The part of kubeadm's v1beta4 config API (kubeadm v1.31 and later:
// cmd/kubeadm/app/apis/kubeadm/v1beta4/types.go) that devk writes, with
// kubeadm's JSON names. devk's module does not have k8s.io/kubernetes,
// whose types these are; kubeadm itself reads and checks the result.

// The kubeadm config documents' group, version and kinds.
const (
	Group                    = "kubeadm.k8s.io"
	Version                  = "v1beta4"
	APIVersion               = Group + "/" + Version
	InitConfigurationKind    = "InitConfiguration"
	ClusterConfigurationKind = "ClusterConfiguration"
	JoinConfigurationKind    = "JoinConfiguration"
)

type initConfiguration struct {
	metav1.TypeMeta  `json:",inline"`
	BootstrapTokens  []bootstrapToken `json:"bootstrapTokens,omitempty"`
	NodeRegistration nodeRegistration `json:"nodeRegistration"`
	LocalAPIEndpoint apiEndpoint      `json:"localAPIEndpoint"`
	CertificateKey   string           `json:"certificateKey,omitempty"`
}

type bootstrapToken struct {
	Token string          `json:"token"`
	TTL   metav1.Duration `json:"ttl"`
}

type nodeRegistration struct {
	Name      string `json:"name"`
	CRISocket string `json:"criSocket"`
	// Taints: nil (left out) is kubeadm's default, the control-plane
	// taint on a control-plane node; empty (taints: []) is none.
	Taints                []corev1.Taint `json:"taints,omitzero"`
	KubeletExtraArgs      []arg          `json:"kubeletExtraArgs,omitempty"`
	IgnorePreflightErrors []string       `json:"ignorePreflightErrors,omitempty"`
	// ImagePullSerial false: kubeadm's preflight pulls the images all
	// at once (nil: kubeadm's default, one after another).
	ImagePullSerial *bool `json:"imagePullSerial,omitempty"`
}

type apiEndpoint struct {
	AdvertiseAddress string `json:"advertiseAddress"`
	BindPort         int32  `json:"bindPort"`
}

// arg is one of v1beta4's extraArgs: a list of name and value, no
// longer v1beta3's map.
type arg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type clusterConfiguration struct {
	metav1.TypeMeta           `json:",inline"`
	ClusterName               string                `json:"clusterName"`
	KubernetesVersion         string                `json:"kubernetesVersion"`
	ImageRepository           string                `json:"imageRepository,omitempty"`
	ControlPlaneEndpoint      string                `json:"controlPlaneEndpoint"`
	Networking                networking            `json:"networking"`
	Etcd                      etcd                  `json:"etcd"`
	APIServer                 apiServer             `json:"apiServer"`
	ControllerManager         controlPlaneComponent `json:"controllerManager"`
	Scheduler                 controlPlaneComponent `json:"scheduler"`
	DNS                       addon                 `json:"dns,omitzero"`
	Proxy                     addon                 `json:"proxy,omitzero"`
	CertificateValidityPeriod *metav1.Duration      `json:"certificateValidityPeriod,omitempty"`
	EncryptionAlgorithm       string                `json:"encryptionAlgorithm,omitempty"`
}

type networking struct {
	ServiceSubnet string `json:"serviceSubnet"`
	PodSubnet     string `json:"podSubnet"`
	DNSDomain     string `json:"dnsDomain,omitempty"`
}

type etcd struct {
	Local localEtcd `json:"local"`
}

type localEtcd struct {
	DataDir string `json:"dataDir"`
}

type controlPlaneComponent struct {
	ExtraArgs []arg `json:"extraArgs,omitempty"`
}

type apiServer struct {
	controlPlaneComponent `json:",inline"`
	CertSANs              []string `json:"certSANs,omitempty"`
}

type addon struct {
	Disabled bool `json:"disabled,omitempty"`
}

type joinConfiguration struct {
	metav1.TypeMeta  `json:",inline"`
	NodeRegistration nodeRegistration  `json:"nodeRegistration"`
	Discovery        discovery         `json:"discovery"`
	ControlPlane     *joinControlPlane `json:"controlPlane,omitempty"`
}

type discovery struct {
	BootstrapToken bootstrapTokenDiscovery `json:"bootstrapToken"`
}

type bootstrapTokenDiscovery struct {
	Token             string   `json:"token"`
	APIServerEndpoint string   `json:"apiServerEndpoint"`
	CACertHashes      []string `json:"caCertHashes"`
}

type joinControlPlane struct {
	LocalAPIEndpoint apiEndpoint `json:"localAPIEndpoint"`
	CertificateKey   string      `json:"certificateKey,omitempty"`
}
