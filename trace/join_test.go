package trace

import (
	"slices"
	"testing"
	"time"

	"github.com/devk/devk/etcdwatch"
)

// TestAssemble: the join by resourceVersion, then by object and time
// (a binding, a delete), reads counted, and which requests are the
// command's.
func TestAssemble(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 14, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	req := func(id string, ms int, user, ip, verb, group, resource, sub, ns, name, rv string) Request {
		return Request{AuditID: id, Time: at(ms), User: user, sourceIP: ip, Verb: verb, group: group, resource: resource,
			subresource: sub, Namespace: ns, Name: name, ResourceVersion: rv, Code: 201}
	}
	reqs := []Request{
		req("svc", 100, "kubernetes-admin", hostIP, "create", "", "services", "", "default", "web", "10"),
		req("get", 110, "kubernetes-admin", hostIP, "get", "", "services", "", "default", "web", ""),
		req("kubelet", 120, "system:node:devk-worker", hostIP, "patch", "", "nodes", "status", "", "devk-worker", "11"),
		req("bind", 300, "system:kube-scheduler", nodeIP, "create", "", "pods", "binding", "default", "web-1", ""),
		req("del", 900, "kubernetes-admin", hostIP, "delete", "", "pods", "", "default", "web-1", "12"),
	}
	w := func(rev int64, ms int, typ etcdwatch.ChangeType, resource, ns, name string) EtcdWrite {
		return EtcdWrite{Revision: rev, Time: at(ms), Type: typ, Resource: resource, Namespace: ns, Name: name}
	}
	writes := []EtcdWrite{
		w(10, 101, etcdwatch.Added, "services", "default", "web"),
		w(11, 121, etcdwatch.Modified, "nodes", "", "devk-worker"),
		w(12, 301, etcdwatch.Modified, "pods", "default", "web-1"),
		w(13, 905, etcdwatch.Deleted, "pods", "default", "web-1"),
		w(14, 950, etcdwatch.Added, "configmaps", "default", "nobody"),
	}
	got, reads, outW := assemble(reqs, writes, Options{}, at(50), at(1000), map[string]bool{nodeIP: true})
	byID := map[string]Request{}
	for _, r := range got {
		byID[r.AuditID] = r
	}
	if _, ok := byID["get"]; ok || reads["get"] != 1 {
		t.Errorf("a read listed (%v) or not counted (%v)", ok, reads)
	}
	for id, want := range map[string][]int64{"svc": {10}, "kubelet": {11}, "bind": {12}, "del": {13}} {
		if !slices.Equal(byID[id].Etcd, want) {
			t.Errorf("%s made %v, want %v", id, byID[id].Etcd, want)
		}
	}
	if outW[4].Request != "" {
		t.Errorf("a write no request made is joined to %s", outW[4].Request)
	}
	for id, want := range map[string]bool{"svc": true, "del": true, "kubelet": false, "bind": false} {
		if byID[id].FromCommand != want {
			t.Errorf("%s from the command: %v, want %v", id, byID[id].FromCommand, want)
		}
	}
	got, _, outW = assemble(reqs, writes, Options{Reads: true, Filter: Filter{Resources: []string{"pods"}}}, at(50), at(1000), nil)
	if len(got) != 2 || len(outW) != 2 {
		t.Errorf("--filter resource=pods kept %d requests and %d writes, want 2 and 2", len(got), len(outW))
	}
}
