package cluster

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/staticpod"
)

// imageBinDir is where the component images keep their binary.
const imageBinDir = "/usr/local/bin"

// StaticPod names a control-plane static pod: its manifest file and the
// component whose image it runs.
type StaticPod struct {
	// Name is the pod's and container's name (kube-apiserver, etcd).
	Name string
	// Component is the build catalog name (apiserver, etcd).
	Component string
}

// StaticPods are the control plane, in start order.
var StaticPods = []StaticPod{
	{"etcd", "etcd"},
	{"kube-apiserver", "apiserver"},
	{"kube-controller-manager", "controller-manager"},
	{"kube-scheduler", "scheduler"},
}

// ManifestInput is what a static pod manifest depends on.
type ManifestInput struct {
	Config layout.Config
	Paths  layout.Paths
	// Image is the component's image by digest (repo@sha256:…).
	Image string
}

func flagList(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, "--"+k+"="+m[k])
	}
	return out
}

func hostPathVolume(name, path string, t corev1.HostPathType) (corev1.Volume, corev1.VolumeMount) {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}},
		corev1.VolumeMount{Name: name, MountPath: path}
}

func httpProbe(host string, port int, path string, scheme corev1.URIScheme, initial, period, failures int32) *corev1.Probe {
	return &corev1.Probe{
		ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Host: host, Path: path, Port: intstr.FromInt32(int32(port)), Scheme: scheme,
		}},
		InitialDelaySeconds: initial,
		PeriodSeconds:       period,
		TimeoutSeconds:      15,
		FailureThreshold:    failures,
	}
}

// Manifest renders the static pod of one control-plane component, the
// way kubeadm does, with every path the same inside and outside the
// container and every port on loopback.
func Manifest(name string, in ManifestInput) ([]byte, error) {
	if !strings.Contains(in.Image, "@sha256:") {
		return nil, fmt.Errorf("image %q of %s is not by digest: push it first (`devk up phase images`)", in.Image, name)
	}
	cfg, p := in.Config, in.Paths
	ip := cfg.AdvertiseIP
	pki := p.PKI()
	port := strconv.Itoa
	var (
		args    map[string]string
		volumes []corev1.Volume
		mounts  []corev1.VolumeMount
		probe   *corev1.Probe
		ready   *corev1.Probe
		cpu     = "100m"
	)
	addVol := func(vname, path string, t corev1.HostPathType) {
		v, m := hostPathVolume(vname, path, t)
		volumes = append(volumes, v)
		mounts = append(mounts, m)
	}
	switch name {
	case "etcd":
		client := "https://" + ip + ":" + port(cfg.Ports.EtcdClient)
		peer := "https://" + ip + ":" + port(cfg.Ports.EtcdPeer)
		args = map[string]string{
			"name":                        cfg.NodeName,
			"data-dir":                    p.Etcd(),
			"advertise-client-urls":       client,
			"listen-client-urls":          client,
			"initial-advertise-peer-urls": peer,
			"listen-peer-urls":            peer,
			"initial-cluster":             cfg.NodeName + "=" + peer,
			"listen-metrics-urls":         "http://" + ip + ":" + port(cfg.Ports.EtcdMetrics),
			"cert-file":                   pki + "/etcd/server.crt",
			"key-file":                    pki + "/etcd/server.key",
			"trusted-ca-file":             pki + "/etcd/ca.crt",
			"client-cert-auth":            "true",
			"peer-cert-file":              pki + "/etcd/peer.crt",
			"peer-key-file":               pki + "/etcd/peer.key",
			"peer-trusted-ca-file":        pki + "/etcd/ca.crt",
			"peer-client-cert-auth":       "true",
			"snapshot-count":              "10000",
		}
		addVol("etcd-data", p.Etcd(), corev1.HostPathDirectoryOrCreate)
		addVol("etcd-certs", pki+"/etcd", corev1.HostPathDirectory)
		// /health works on every etcd 3.5 and 3.6 (/livez and /readyz came later).
		probe = httpProbe(ip, cfg.Ports.EtcdMetrics, "/health?exclude=NOSPACE&serializable=true", corev1.URISchemeHTTP, 10, 10, 8)
		ready = httpProbe(ip, cfg.Ports.EtcdMetrics, "/health?serializable=false", corev1.URISchemeHTTP, 0, 2, 3)
	case "kube-apiserver":
		args = map[string]string{
			"advertise-address":                  ip,
			"bind-address":                       ip,
			"secure-port":                        port(cfg.Ports.APIServer),
			"allow-privileged":                   "true",
			"authorization-mode":                 "Node,RBAC",
			"client-ca-file":                     pki + "/ca.crt",
			"enable-admission-plugins":           "NodeRestriction",
			"enable-bootstrap-token-auth":        "true",
			"etcd-cafile":                        pki + "/etcd/ca.crt",
			"etcd-certfile":                      pki + "/apiserver-etcd-client.crt",
			"etcd-keyfile":                       pki + "/apiserver-etcd-client.key",
			"etcd-servers":                       "https://" + ip + ":" + port(cfg.Ports.EtcdClient),
			"kubelet-client-certificate":         pki + "/apiserver-kubelet-client.crt",
			"kubelet-client-key":                 pki + "/apiserver-kubelet-client.key",
			"kubelet-preferred-address-types":    "InternalIP,ExternalIP,Hostname",
			"proxy-client-cert-file":             pki + "/front-proxy-client.crt",
			"proxy-client-key-file":              pki + "/front-proxy-client.key",
			"requestheader-allowed-names":        "front-proxy-client",
			"requestheader-client-ca-file":       pki + "/front-proxy-ca.crt",
			"requestheader-extra-headers-prefix": "X-Remote-Extra-",
			"requestheader-group-headers":        "X-Remote-Group",
			"requestheader-username-headers":     "X-Remote-User",
			"service-account-issuer":             "https://kubernetes.default.svc." + cfg.DNSDomain,
			"service-account-key-file":           pki + "/sa.pub",
			"service-account-signing-key-file":   pki + "/sa.key",
			"service-cluster-ip-range":           cfg.ServiceCIDR,
			"tls-cert-file":                      pki + "/apiserver.crt",
			"tls-private-key-file":               pki + "/apiserver.key",
		}
		addVol("k8s-certs", pki, corev1.HostPathDirectory)
		probe = httpProbe(ip, cfg.Ports.APIServer, "/livez", corev1.URISchemeHTTPS, 10, 10, 8)
		ready = httpProbe(ip, cfg.Ports.APIServer, "/readyz", corev1.URISchemeHTTPS, 0, 1, 3)
		cpu = "250m"
	case "kube-controller-manager":
		kc := p.Kubeconfig("controller-manager")
		args = map[string]string{
			"authentication-kubeconfig":        kc,
			"authorization-kubeconfig":         kc,
			"kubeconfig":                       kc,
			"bind-address":                     ip,
			"secure-port":                      port(cfg.Ports.ControllerManager),
			"client-ca-file":                   pki + "/ca.crt",
			"cluster-name":                     cfg.Name,
			"cluster-signing-cert-file":        pki + "/ca.crt",
			"cluster-signing-key-file":         pki + "/ca.key",
			"controllers":                      "*,bootstrapsigner,tokencleaner",
			"leader-elect":                     "false",
			"requestheader-client-ca-file":     pki + "/front-proxy-ca.crt",
			"root-ca-file":                     pki + "/ca.crt",
			"service-account-private-key-file": pki + "/sa.key",
			"service-cluster-ip-range":         cfg.ServiceCIDR,
			"use-service-account-credentials":  "true",
		}
		addVol("k8s-certs", pki, corev1.HostPathDirectory)
		addVol("kubeconfig", kc, corev1.HostPathFileOrCreate)
		probe = httpProbe(ip, cfg.Ports.ControllerManager, "/healthz", corev1.URISchemeHTTPS, 10, 10, 8)
		cpu = "200m"
	case "kube-scheduler":
		kc := p.Kubeconfig("scheduler")
		args = map[string]string{
			"authentication-kubeconfig": kc,
			"authorization-kubeconfig":  kc,
			"kubeconfig":                kc,
			"bind-address":              ip,
			"secure-port":               port(cfg.Ports.Scheduler),
			"leader-elect":              "false",
		}
		addVol("kubeconfig", kc, corev1.HostPathFileOrCreate)
		probe = httpProbe(ip, cfg.Ports.Scheduler, "/healthz", corev1.URISchemeHTTPS, 10, 10, 8)
		ready = httpProbe(ip, cfg.Ports.Scheduler, "/healthz", corev1.URISchemeHTTPS, 0, 1, 3)
	default:
		return nil, fmt.Errorf("no static pod %q: the control plane is etcd, kube-apiserver, kube-controller-manager and kube-scheduler", name)
	}
	priority := int32(2000001000)
	pod := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: metav1.NamespaceSystem,
			Labels:    map[string]string{"component": name, "tier": "control-plane", "app.kubernetes.io/managed-by": "devk"},
		},
		Spec: corev1.PodSpec{
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Priority:          &priority,
			Containers: []corev1.Container{{
				Name:            name,
				Image:           in.Image,
				ImagePullPolicy: corev1.PullIfNotPresent,
				Command:         append([]string{imageBinDir + "/" + name}, flagList(args)...),
				VolumeMounts:    mounts,
				LivenessProbe:   probe,
				ReadinessProbe:  ready,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse(cpu),
				}},
			}},
			Volumes: volumes,
		},
	}
	if name == "etcd" {
		pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory] = resource.MustParse("100Mi")
	}
	data, err := yaml.Marshal(pod)
	if err != nil {
		return nil, err
	}
	return append([]byte("# written by devk; `devk swap` replaces the image\n"), data...), nil
}

// writeManifest renders and installs one static pod manifest; the temp
// file lives outside the manifests dir, which the kubelet scans.
func (c *Cluster) writeManifest(_ context.Context, sp StaticPod) error {
	img := c.Config.Images[sp.Component]
	if img == "" {
		return fmt.Errorf("no image recorded for %s: run `devk up phase images` first", sp.Component)
	}
	path := c.ManifestPath(sp.Name)
	// An image a swap put in stays: running up again after a swap must
	// change nothing (`devk swap --rollback` goes back).
	var onDisk *corev1.Pod
	if data, err := os.ReadFile(path); err == nil {
		if pod, err := staticpod.Parse(data); err == nil {
			onDisk = pod
			if swapped, ok := staticpod.SwappedImage(pod); ok && swapped != img {
				img = swapped
			}
		}
	}
	data, err := Manifest(sp.Name, ManifestInput{Config: c.Config, Paths: c.Paths, Image: img})
	if err != nil {
		return err
	}
	short := img
	if i := strings.Index(img, "@sha256:"); i >= 0 {
		short = img[strings.LastIndex(img[:i], "/")+1:i] + "@" + img[i+8:i+8+12]
	}
	if img != c.Config.Images[sp.Component] {
		short += " (swapped in)"
	}
	if onDisk != nil {
		if rendered, err := staticpod.Parse(data); err == nil && staticpod.SameButStamp(onDisk, rendered) {
			c.setDetail("control-plane/"+sp.Name, "unchanged %s", short)
			return nil
		}
	}
	changed, err := writeIfChanged(path, data, 0o600, c.Tmp())
	if err != nil {
		return err
	}
	if changed {
		c.did("control-plane/"+sp.Name, "wrote %s", short)
	} else {
		c.setDetail("control-plane/"+sp.Name, "unchanged %s", short)
	}
	return nil
}

// readManifestImage returns the image a static pod manifest names.
func readManifestImage(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return "", fmt.Errorf("parse %s: %w", path, err)
	}
	if len(pod.Spec.Containers) == 0 {
		return "", fmt.Errorf("%s has no container", path)
	}
	return pod.Spec.Containers[0].Image, nil
}
