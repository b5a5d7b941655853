// Package nodecerts is a node's share of kubeadm's certificate set as
// up and a control-plane join issue it: the set's inputs from
// cluster.json and the node, and each certificate ensured (reused while
// it checks) without replacing one under a running control plane.
// cluster's certs/… phases and a control-plane join's certs phase call
// it.
package nodecerts

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/pki"
)

// Config is what the certificate set of node n of the cluster cfg
// depends on.
func Config(cfg layout.Config, n layout.NodeNet) (pki.Config, error) {
	sip, err := cfg.ServiceIP()
	if err != nil {
		return pki.Config{}, err
	}
	pc := pki.Config{NodeName: n.Name, ServiceIP: sip, AdvertiseIP: net.ParseIP(n.IP), DNSDomain: cfg.DNSDomain,
		Validity: cfg.Spec.LeafValidity()}
	if cfg.HA() {
		pc.EndpointIP = net.ParseIP(cfg.Network.HostIP)
	}
	return pc, nil
}

// Outcome is what ensuring a key pair did.
func Outcome(res pki.Result) phase.Outcome {
	return phase.Outcome{Detail: res.String(), Changed: res != pki.Reused}
}

// Ensure makes certificate name of the set pc in pkiDir unless it is
// there and checks. running says the node's control plane runs: then no
// certificate is replaced under it, and one that expires soon is left
// to up's certs-expiry.
func Ensure(pkiDir string, pc pki.Config, name string, running bool) (phase.Outcome, error) {
	for _, s := range pki.Specs(pc) {
		if s.Name != name {
			continue
		}
		res, err := pki.Ensure(pkiDir, s, time.Now(), !running)
		if running && errors.Is(err, pki.ErrExpiring) {
			// Not under the running control plane: certs-expiry warns,
			// or renews it with --renew-certs, restarting what uses it.
			return phase.Unchanged("expiring; left to certs-expiry"), nil
		}
		if err != nil {
			return phase.Done, err
		}
		return Outcome(res), nil
	}
	return phase.Done, fmt.Errorf("no certificate %q", name)
}
