package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/devk/devk/etcdwatch/etcdtest"
)

func TestEtcdArgErrors(t *testing.T) {
	// none of these reach etcd: the port is never dialled
	ep := []string{"--endpoints", "http://127.0.0.1:1"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"get needs an object", []string{"etcd", "get"}, "accepts 1 arg(s)"},
		{"get of a bare name", []string{"etcd", "get", "web"}, "RESOURCE/NAME"},
		{"ls of an unknown resource", []string{"etcd", "ls", "podz"}, "did you mean pods"},
		{"watch of an unknown resource", []string{"etcd", "watch", "srevices"}, "did you mean services"},
		{"negative revision", []string{"etcd", "get", "po/x", "--rev", "-1"}, "revisions start at 1"},
		{"bad ignore path", []string{"etcd", "get", "po/x", "--ignore", "a..b"}, "names joined by dots"},
		{"unknown exclude", []string{"etcd", "diff", "--since-rev", "3", "--exclude", "leasez"}, "did you mean leases"},
		{"nothing after --", []string{"etcd", "diff", "--"}, "nothing after --"},
		{"two targets", []string{"etcd", "diff", "pods", "kubectl", "--", "x"}, "put the command after --"},
		{"cluster-scoped with namespace", []string{"etcd", "ls", "nodes/x"}, "not namespaced"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// flags before any --, which ends devk's flags
			args := append(append(append([]string{}, tc.args[:2]...), ep...), tc.args[2:]...)
			_, _, err := runDevk(t, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestEtcdHelpTeaches(t *testing.T) {
	for _, sub := range []string{"ls", "get", "watch", "diff"} {
		out, _, err := runDevk(t, "etcd", sub, "--help")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "Examples:\n  devk etcd "+sub) {
			t.Errorf("etcd %s --help has no examples:\n%s", sub, out)
		}
		for _, flag := range []string{"--endpoints", "--cacert", "--cluster"} {
			if !strings.Contains(out, flag) {
				t.Errorf("etcd %s --help lacks %s", sub, flag)
			}
		}
	}
}

// TestEtcdCommands runs the commands against a real embedded etcd, from
// flags to printed output.
func TestEtcdCommands(t *testing.T) {
	srv, cli := etcdtest.StartT(t)
	ctx := context.Background()
	if err := etcdtest.Put(ctx, cli, map[string][]byte{
		"/registry/configmaps/default/x":       etcdtest.MustEncode(etcdtest.ConfigMap("default", "x", 1)),
		"/registry/services/specs/default/web": etcdtest.MustEncode(etcdtest.Service("default", "web", 2)),
		"/registry/secrets/default/db":         etcdtest.MustEncode(etcdtest.Secret("default", "db", 1)),
	}); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	since := resp.Header.Revision
	if _, err := cli.Delete(ctx, "/registry/configmaps/default/x"); err != nil {
		t.Fatal(err)
	}
	// no devk cluster or kubeadm node may leak in from the machine
	t.Setenv("DEVK_HOME", t.TempDir())
	for _, env := range []string{"ETCDCTL_ENDPOINTS", "ETCDCTL_CACERT", "ETCDCTL_CERT", "ETCDCTL_KEY"} {
		t.Setenv(env, "")
	}

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"get decoded", []string{"etcd", "get", "svc/default/web"}, []string{"kind: Service", "clusterIP: 10.96.0.3"}},
		{"get redacts", []string{"etcd", "get", "secret/db"}, []string{"password: <redacted, 7 bytes>"}},
		{"get json", []string{"etcd", "get", "secret/db", "-o", "json", "--show-secrets"}, []string{`"password":"aHVudGVyMQ=="`}},
		{"ls count", []string{"etcd", "ls", "--count"}, []string{"secrets      1\nservices     1\ntotal        2\n"}},
		{"diff since a revision", []string{"etcd", "diff", "--since-rev", strconv.FormatInt(since, 10)}, []string{"DELETED configmaps default/x", "-kind: ConfigMap"}},
		{"endpoint from ETCDCTL_ENDPOINTS", []string{"etcd", "ls", "svc"}, []string{"/registry/services/specs/default/web"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.name == "endpoint from ETCDCTL_ENDPOINTS" {
				t.Setenv("ETCDCTL_ENDPOINTS", srv.Endpoint)
			} else {
				args = append(args, "--endpoints", srv.Endpoint)
			}
			out, _, err := runDevk(t, args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}
