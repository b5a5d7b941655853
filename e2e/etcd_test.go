//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

type etcdDiff struct {
	Changes []struct {
		Type      string `json:"type"`
		Key       string `json:"key"`
		Resource  string `json:"resource"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Diff      string `json:"diff"`
		After     *struct {
			Kind string `json:"kind"`
		} `json:"after"`
	} `json:"changes"`
}

// With -o json the diffs are of the JSON rendering; the watch below prints
// YAML.

// A fresh cluster's controllers write for a while: TestEtcd tries its
// diff up to quietTries times, quietRetry apart, for one that holds only
// its own change.
const (
	quietTries = 10
	quietRetry = 3 * time.Second
)

// TestEtcd runs `devk etcd diff` and `watch` against the shared cluster's
// real etcd: a kubectl command's exact change, decoded, and a watch that
// sees a change made through the API.
func TestEtcd(t *testing.T) {
	sc := Cluster(t)
	MustDevk(t, sc.Tree, "build", "kubectl")
	kubectl := []string{sc.KubectlPath(), "--kubeconfig", sc.Kubeconfig}
	diff := func(args ...string) etcdDiff {
		t.Helper()
		r := Devk(t, sc.Tree, sc.Env, append([]string{"etcd", "diff", "-o", "json", "--"}, append(kubectl, args...)...)...)
		if r.Err != nil {
			t.Fatalf("devk etcd diff -- kubectl %s: %v\n%s%s", strings.Join(args, " "), r.Err, r.Stdout, r.Stderr)
		}
		var d etcdDiff
		if err := json.Unmarshal([]byte(r.Stdout), &d); err != nil {
			t.Fatalf("etcd diff -o json: %v\n%s", err, r.Stdout)
		}
		return d
	}

	// A fresh cluster's controllers still write to etcd (service accounts,
	// leases are excluded by default): a diff shows all of it. Retry with
	// a new name until the cluster is quiet for one command; the
	// configmap must then be the only change.
	var cm string
	var d etcdDiff
	var keys []string
	tries := 0
	quiet := wait.Backoff{Duration: quietRetry, Factor: 1, Steps: quietTries}
	err := wait.ExponentialBackoff(quiet, func() (bool, error) {
		tries++
		cm = fmt.Sprintf("devk-e2e-x%d", tries)
		d = diff("create", "configmap", cm, "--from-literal=a=b")
		if len(d.Changes) == 1 {
			return true, nil
		}
		keys = keys[:0]
		for _, c := range d.Changes {
			keys = append(keys, c.Key)
		}
		t.Logf("background writes during the diff, trying again: %v", keys)
		return false, nil
	})
	if err != nil {
		t.Fatalf("the cluster never quieted: every diff held more than the configmap (%v): %v", err, keys)
	}
	c := d.Changes[0]
	if c.Type != "ADDED" || c.Key != "/registry/configmaps/default/"+cm || c.After == nil || c.After.Kind != "ConfigMap" ||
		!regexp.MustCompile(`(?m)^\+\s+"a": "b"$`).MatchString(c.Diff) {
		t.Fatalf("configmap change: %+v", c)
	}

	sc.Kubectl(t, "create", "service", "clusterip", "devk-e2e-svc", "--tcp=80:8080")
	d = diff("patch", "service", "devk-e2e-svc", "--type=json", "-p", `[{"op":"replace","path":"/spec/ports/0/port","value":81}]`)
	var svc *struct{ Type, Diff string }
	for _, ch := range d.Changes {
		if ch.Key == "/registry/services/specs/default/devk-e2e-svc" {
			svc = &struct{ Type, Diff string }{ch.Type, ch.Diff}
		}
	}
	if svc == nil || svc.Type != "MODIFIED" || !regexp.MustCompile(`(?m)^-\s+"port": 80,?$`).MatchString(svc.Diff) ||
		!regexp.MustCompile(`(?m)^\+\s+"port": 81,?$`).MatchString(svc.Diff) {
		t.Fatalf("service patch: %+v\nall changes: %+v", svc, d.Changes)
	}

	// watch sees a change made through the API.
	cmd := exec.Command(devkBin, "etcd", "watch", "configmaps", "-n", "default")
	cmd.Dir, cmd.Env = sc.Tree, append(cmd.Environ(), sc.Env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	time.Sleep(2 * time.Second) // the watch is open once devk has connected
	sc.Kubectl(t, "patch", "configmap", cm, "-p", `{"data":{"a":"c"}}`)
	deadline := time.After(60 * time.Second)
	var seen []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("devk etcd watch ended; it printed:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.Contains(strings.Join(seen, "\n"), "MODIFIED configmaps default/"+cm) && strings.Contains(l, "+  a: c") {
				return
			}
		case <-deadline:
			t.Fatalf("the watch did not show the patch; it printed:\n%s", strings.Join(seen, "\n"))
		}
	}
}
