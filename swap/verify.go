package swap

import (
	"context"
	"fmt"
	neturl "net/url"
	"strings"

	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/kube"
	"github.com/devk/devk/internal/staticpod"
)

// The checks verify adds to digest's.
const (
	checkHealthy = "healthy"
	checkVersion = "/version gitVersion"
	healthyWant  = "200 OK"
)

// verify compares every view of what runs with the pushed digest: the
// manifest on disk (what it names now, not what was meant to be written),
// the running container and the mirror pod (digest.PodChecks, as `devk
// digest verify` does), the health endpoint and, for the apiserver,
// /version.
func (n *Target) verify(ctx context.Context, t podImage, s podState, health string) []Check {
	named, _ := staticpod.Image(ManifestFor(n.ManifestsDir, t.Pod).Path, t.Pod)
	if named == t.Image && digest.Of(named) == "" {
		named = t.Digest // the tag it names, as the runtime resolved it
	}
	checks := digest.PodChecks(t.digest(), digest.PodView{
		ManifestImage: named,
		ImageRef:      s.imageRef,
		PodUID:        s.podUID,
		MirrorImageID: s.mirrorImage,
		ConfigHash:    s.configHash,
	})
	checks = append(checks, Check{Name: checkHealthy, Want: healthyWant, Got: healthGot(s), OK: s.healthy})
	if t.Version != "" {
		got, err := n.serverVersion(ctx, health)
		if err != nil {
			got = err.Error()
		}
		checks = append(checks, Check{Name: checkVersion, Want: t.Version, Got: got, OK: got == t.Version})
	}
	return checks
}

// serverVersion is the gitVersion of the API server the pod runs: asked
// at its own address (its probe's), since the kubeconfig may name a load
// balancer in front of several; through the client when the probe has
// no address.
func (n *Target) serverVersion(ctx context.Context, health string) (string, error) {
	if u, err := neturl.Parse(health); err == nil && u.Host != "" && u.Scheme == "https" {
		return kube.EndpointVersion(ctx, u.Scheme+"://"+u.Host)
	}
	return kube.ServerVersion(n.Client)
}

// nodeChecks are the checks a rollback is decided on: the ones about what
// the node runs, not the mirror pod's (lagging) report of it.
func nodeChecks(checks []Check) []Check {
	var out []Check
	for _, c := range checks {
		if !c.Mirror() {
			out = append(out, c)
		}
	}
	return out
}

func healthGot(s podState) string {
	if s.healthy {
		return healthyWant
	}
	if s.healthErr != nil {
		return s.healthErr.Error()
	}
	return "no running container"
}

func checksError(checks []Check) error {
	var failed []string
	for _, c := range checks {
		if !c.OK {
			failed = append(failed, fmt.Sprintf("%s: want %s, got %s", c.Name, c.Want, c.Got))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("verification failed: %s", strings.Join(failed, "; "))
}
