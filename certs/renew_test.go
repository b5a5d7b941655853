package certs

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/testutil"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// TestRenewRefusesBeforeWriting: names renew cannot take, a CA without
// its key, and a node whose runtime does not answer are errors that
// change no file.
func TestRenewRefusesBeforeWriting(t *testing.T) {
	f := fixturePKI(t, time.Now())
	if err := os.Remove(pki.KeyPath(f.PKIDir, "front-proxy-ca")); err != nil {
		t.Fatal(err)
	}
	before := testutil.DirSnapshot(t, filepath.Dir(f.PKIDir))
	socket := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		names []string
		want  string
	}{
		{[]string{"apiservr"}, `no certificate "apiservr": use one of admin.conf, apiserver,`},
		{[]string{"ca"}, `no certificate "ca"`},
		{[]string{"all", "apiserver"}, `"all" renews every certificate: name no others beside it`},
		{[]string{"front-proxy-client"}, "front-proxy-client cannot be renewed here: its CA front-proxy-ca is external"},
		{[]string{"apiserver"}, "renew needs the cluster running"},
		{[]string{"all"}, "renew needs the cluster running"},
	} {
		_, err := Renew(context.Background(), RenewOptions{Nodes: oneNode(f, socket), Names: tc.names, Timeout: time.Second}, phase.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("renew %v: %v, want %q", tc.names, err, tc.want)
		}
	}
	after := testutil.DirSnapshot(t, filepath.Dir(f.PKIDir))
	if len(after) != len(before) {
		t.Fatalf("files: %d before, %d after", len(before), len(after))
	}
	for p, data := range before {
		if after[p] != data {
			t.Errorf("%s changed", p)
		}
	}
}

// TestServingAddr: where verify looks for each serving certificate, from
// its server's manifest: the API server's advertise address, a
// controller-manager's and a scheduler's --bind-address and
// --secure-port (their defaults, and loopback for all addresses, as
// kubeadm writes them), and nowhere when the server's manifest does not
// name the file (a cluster made before devk issued it) or the
// certificate serves nothing.
func TestServingAddr(t *testing.T) {
	f := fixturePKI(t, time.Now())
	cm := "--tls-cert-file=" + pki.CertPath(f.PKIDir, pki.ControllerManagerServer)
	sched := "--tls-cert-file=" + pki.CertPath(f.PKIDir, pki.SchedulerServer)
	for _, tc := range []struct {
		name     string
		manifest []string // pod, then flags
		cert     string
		want     string
	}{
		{"devk's controller-manager", []string{"kube-controller-manager", cm, "--bind-address=10.250.0.2", "--secure-port=10257"}, "controller-manager-server", "10.250.0.2:10257"},
		{"another port", []string{"kube-controller-manager", cm, "--bind-address=10.250.0.2", "--secure-port=20257"}, "controller-manager-server", "10.250.0.2:20257"},
		{"kubeadm's scheduler flags", []string{"kube-scheduler", sched, "--bind-address=127.0.0.1"}, "scheduler-server", "127.0.0.1:10259"},
		{"all addresses", []string{"kube-scheduler", sched, "--bind-address=0.0.0.0"}, "scheduler-server", "127.0.0.1:10259"},
		{"all IPv6 addresses", []string{"kube-scheduler", sched, "--bind-address=::"}, "scheduler-server", "127.0.0.1:10259"},
		{"secure serving off", []string{"kube-scheduler", sched, "--secure-port=0"}, "scheduler-server", ""},
		{"an older manifest without the file", []string{"kube-scheduler", "--bind-address=10.250.0.2"}, "scheduler-server", ""},
		{"the API server", []string{"kube-apiserver", "--tls-cert-file=" + pki.CertPath(f.PKIDir, "apiserver"), "--advertise-address=10.250.0.2", "--secure-port=6443"}, "apiserver", "10.250.0.2:6443"},
		{"a client certificate", []string{"kube-apiserver", "--proxy-client-cert-file=" + pki.CertPath(f.PKIDir, "front-proxy-client")}, "front-proxy-client", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			writeManifest(t, f, tc.manifest[0], tc.manifest[1:]...)
			r, err := Inspect(f, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			c := r.Certs[slices.IndexFunc(r.Certs, func(c Cert) bool { return c.Name == tc.cert })]
			j := &nodeRenewal{RenewNode: RenewNode{ControlPlaneNode: layout.ControlPlaneNode{Node: f}}}
			got, err := j.servingAddr(c)
			if err != nil || got != tc.want {
				t.Errorf("servingAddr(%s) = %q, %v; want %q", tc.cert, got, err, tc.want)
			}
		})
	}
}

// TestVerifyBySerial: verify's check of a renewed serving certificate
// against a real TLS server on loopback that serves the files as they
// are at each handshake: the certificate before renewal is not taken for
// the renewed one; after it, the new serial is seen.
func TestVerifyBySerial(t *testing.T) {
	f := fixturePKI(t, time.Now())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		cfg := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(pki.CertPath(f.PKIDir, pki.SchedulerServer), pki.KeyPath(f.PKIDir, pki.SchedulerServer))
			return &c, err
		}}
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(conn, cfg)
			tc.Handshake()
			tc.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	writeManifest(t, f, "kube-scheduler", "--tls-cert-file="+pki.CertPath(f.PKIDir, pki.SchedulerServer), "--bind-address=127.0.0.1", "--secure-port="+port)
	r, err := Inspect(f, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	c := r.Certs[slices.IndexFunc(r.Certs, func(c Cert) bool { return c.Name == "scheduler-server" })]

	j := &nodeRenewal{RenewNode: RenewNode{ControlPlaneNode: layout.ControlPlaneNode{Node: f}}}
	old, renewed, err := pki.Renew(f.PKIDir, pki.SchedulerServer, pki.CAName, time.Now(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rn := &Renewed{Name: c.Name, Serial: renewed.SerialNumber.Text(16), cert: c, renewed: renewed}
	check := j.checkOf(rn)
	if check == nil {
		t.Fatal("no serial check for the scheduler's serving certificate")
	}
	how, err := check(context.Background())
	if err != nil || !strings.Contains(how, "127.0.0.1:"+port+" presents serial "+rn.Serial) {
		t.Errorf("after renewal: %q, %v; want the new serial seen on the scheduler's port", how, err)
	}
	if _, err := pki.Restore(pki.CertPath(f.PKIDir, pki.SchedulerServer)); err != nil {
		t.Fatal(err)
	}
	if _, err := check(context.Background()); err == nil || !strings.Contains(err.Error(), "presents serial "+old.SerialNumber.Text(16)+", not the renewed") {
		t.Errorf("with the old certificate served: %v, want a serial mismatch", err)
	}
}

// oneNode is renew's one unnamed node (a kubeadm node's) of files f and
// runtime socket.
func oneNode(f layout.Node, socket string) []RenewNode {
	f.CRISocket = socket
	return []RenewNode{{ControlPlaneNode: layout.ControlPlaneNode{Node: f}}}
}

// TestRenewNodeJSON: a node in renew's result is its name, its files as
// check-expiration's report lists them (the kubeconfigs beside its admin
// kubeconfig) and its runtime, not the functions that drive it.
func TestRenewNodeJSON(t *testing.T) {
	n := RenewNode{ControlPlaneNode: layout.ControlPlaneNode{Name: "cp2", Node: layout.Kubeadm("/k"),
		PutBack: func(context.Context, bool) error { return nil }}}
	got, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"node":"cp2","files":{"pkiDir":"/k/pki","kubeconfigDir":"/k","manifestsDir":"/k/manifests"},"criSocket":"` + layout.KubeadmCRISocket + `"}`
	if string(got) != want {
		t.Errorf("%s\nwant %s", got, want)
	}
}
