// Package kube is how devk talks to a cluster's API server and to the
// node's own health endpoints: one way to build a clientset from a
// kubeconfig, one way to probe a loopback health endpoint, one way to ask
// the server's version.
package kube

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// RequestTimeout bounds each API request: the API server may be the
	// very pod being swapped or started, and devk must never hang on it.
	RequestTimeout = 5 * time.Second
	// ProbeTimeout bounds one health probe.
	ProbeTimeout = 3 * time.Second
	// QPS and Burst let devk's bursts of bootstrap writes through
	// client-go's rate limiter.
	QPS, Burst = 50, 100
	// probeBodyLimit is how much of a failing probe's body the error shows.
	probeBodyLimit = 512
)

// Client is a clientset for the kubeconfig file, each request bounded by
// RequestTimeout.
func Client(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.Timeout = RequestTimeout
	cfg.QPS, cfg.Burst = QPS, Burst
	return kubernetes.NewForConfig(cfg)
}

// insecureLoopback probes the node's own endpoints as the kubelet's
// probes do: the serving certificates are self-signed or signed by a CA
// the probe does not need, and the endpoint is this machine's.
var insecureLoopback = &http.Client{
	Timeout:   ProbeTimeout,
	Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true},
}

// Probe GETs a health endpoint (http or https, on the node itself) and
// succeeds on 200 OK; otherwise the error names the URL, the status and
// the start of the body (which says what is not ready).
func Probe(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := insecureLoopback.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, probeBodyLimit))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// ServerVersion is the API server's gitVersion, through discovery.
func ServerVersion(cs kubernetes.Interface) (string, error) {
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return "", err
	}
	return v.GitVersion, nil
}

// MirrorPodName is the name the kubelet gives the mirror pod of static
// pod pod on node nodeName.
func MirrorPodName(pod, nodeName string) string { return pod + "-" + nodeName }
