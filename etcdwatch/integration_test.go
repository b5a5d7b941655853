package etcdwatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/etcdwatch/etcdtest"
	"github.com/devk/devk/internal/output"
	"github.com/devk/devk/internal/syncbuf"
)

const widgetJSON = `{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w1","namespace":"%s"},"spec":{"size":3}}`

// loadNamespace writes one object of each fixture kind (two pods) into
// namespace ns, plus a custom resource as JSON, an encrypted-looking
// value and garbage. It returns the revision after the writes.
func loadNamespace(t *testing.T, cli *clientv3.Client, ns string) int64 {
	t.Helper()
	kvs := map[string][]byte{
		"/registry/pods/" + ns + "/web-1":               etcdtest.MustEncode(etcdtest.Pod(ns, "web-1", 1)),
		"/registry/pods/" + ns + "/web-2":               etcdtest.MustEncode(etcdtest.Pod(ns, "web-2", 2)),
		"/registry/services/specs/" + ns + "/web":       etcdtest.MustEncode(etcdtest.Service(ns, "web", 3)),
		"/registry/configmaps/" + ns + "/settings":      etcdtest.MustEncode(etcdtest.ConfigMap(ns, "settings", 4)),
		"/registry/secrets/" + ns + "/db":               etcdtest.MustEncode(etcdtest.Secret(ns, "db", 1)),
		"/registry/endpointslices/" + ns + "/web-abcde": etcdtest.MustEncode(etcdtest.EndpointSlice(ns, "web-abcde", 6)),
		"/registry/leases/" + ns + "/leader":            etcdtest.MustEncode(etcdtest.Lease(ns, "leader", 7)),
		"/registry/example.com/widgets/" + ns + "/w1":   []byte(fmt.Sprintf(widgetJSON, ns)),
		"/registry/secrets/" + ns + "/sealed":           append([]byte("k8s:enc:aesgcm:v1:key2:"), 0x01, 0x9c, 0xff, 0x00),
		"/registry/configmaps/" + ns + "/garbage":       {0xde, 0xad, 0xbe, 0xef},
		"/registry/namespaces/" + ns:                    []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":%q}}`, ns)),
	}
	if err := etcdtest.Put(context.Background(), cli, kvs); err != nil {
		t.Fatal(err)
	}
	return rev(t, cli)
}

func TestLs(t *testing.T) {
	cli := client(t)
	loadNamespace(t, cli, "ls")
	before := rev(t, cli)
	put(t, cli, "/registry/pods/ls/web-3", etcdtest.MustEncode(etcdtest.Pod("ls", "web-3", 3)))
	page := map[string][]byte{}
	for i := 0; i < 2*pageSize+5; i++ {
		page[fmt.Sprintf("/registry/configmaps/paging/cm-%04d", i)] = []byte("{}")
	}
	if err := etcdtest.Put(context.Background(), cli, page); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		o       LsOptions
		want    []string // exact lines
		wantErr error
		errText string
	}{
		{name: "pods in a namespace", o: LsOptions{Query: Query{Target: "pods/ls"}},
			want: []string{"/registry/pods/ls/web-1", "/registry/pods/ls/web-2", "/registry/pods/ls/web-3"}},
		{name: "resource with -n", o: LsOptions{Query: Query{Target: "svc", Namespace: "ls"}},
			want: []string{"/registry/services/specs/ls/web"}},
		{name: "raw prefix", o: LsOptions{Query: Query{Target: "/registry/secrets/ls/"}},
			want: []string{"/registry/secrets/ls/db", "/registry/secrets/ls/sealed"}},
		{name: "at a past revision", o: LsOptions{Query: Query{Target: "pods/ls"}, Rev: before},
			want: []string{"/registry/pods/ls/web-1", "/registry/pods/ls/web-2"}},
		{name: "count per resource in a namespace", o: LsOptions{Query: Query{Namespace: "ls"}, Count: true},
			want: []string{
				"RESOURCE             KEYS",
				"configmaps              2",
				"endpointslices          1",
				"leases                  1",
				"pods                    3",
				"secrets                 2",
				"services                1",
				"widgets.example.com     1",
				"total                  11",
			}},
		{name: "count pages through more than one page", o: LsOptions{Query: Query{Target: "cm/paging"}, Count: true},
			want: []string{"RESOURCE    KEYS", "configmaps  2005", "total       2005"}},
		{name: "unknown resource lists close matches", o: LsOptions{Query: Query{Target: "podz"}}, wantErr: ErrUnknownResource, errText: "did you mean pods"},
		{name: "future revision", o: LsOptions{Query: Query{Target: "pods"}, Rev: 1 << 40}, wantErr: ErrFutureRevision, errText: "use a revision from 1 to"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tc.o.Conn, tc.o.Out = conn(), &out
			if wantErrIs(t, Ls(context.Background(), tc.o), tc.wantErr, tc.errText) {
				return
			}
			got := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}

	t.Run("json", func(t *testing.T) {
		var out bytes.Buffer
		if err := Ls(context.Background(), LsOptions{Query: Query{Conn: conn(), Target: "pods/ls", Format: output.JSON, Out: &out}}); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Revision int64
			Keys     []KeyEntry
		}
		if err := json.Unmarshal(out.Bytes(), &got); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		if len(got.Keys) != 3 || got.Keys[0].Resource != "pods" || got.Keys[0].Namespace != "ls" || got.Keys[0].Name != "web-1" || got.Keys[0].ModRevision == 0 || got.Revision == 0 {
			t.Errorf("unexpected: %+v", got)
		}
	})
}

func TestGet(t *testing.T) {
	cli := client(t)
	loadNamespace(t, cli, "get")
	svc := etcdtest.Service("get", "web", 3)
	oldRev := rev(t, cli)
	svc.Spec.Ports[0].Port = 8443
	put(t, cli, "/registry/services/specs/get/web", etcdtest.MustEncode(svc))
	loadNamespace(t, cli, "get-other")
	put(t, cli, "/registry/apiextensions.k8s.io/customresourcedefinitions/widgets.get.example.com", etcdtest.MustEncodeStored(etcdtest.CustomResourceDefinition("get.example.com", 1)))
	put(t, cli, "/registry/apiregistration.k8s.io/apiservices/v1.get.example.com", etcdtest.MustEncodeStored(etcdtest.APIService("get.example.com", "v1", 2)))

	tests := []struct {
		name     string
		o        GetOptions
		contains []string
		absent   []string
		wantErr  error
		errText  string
	}{
		{name: "pod by resource path", o: GetOptions{Query: Query{Target: "pods/get/web-1"}},
			contains: []string{"# /registry/pods/get/web-1\n", "Kubernetes protobuf v1 Pod", "kind: Pod", "name: web-1", "image: registry.k8s.io/nginx-slim:0.27"}},
		{name: "raw key", o: GetOptions{Query: Query{Target: "/registry/endpointslices/get/web-abcde"}},
			contains: []string{"kind: EndpointSlice", "addressType: IPv4"}},
		{name: "short name and -n", o: GetOptions{Query: Query{Target: "svc/web", Namespace: "get"}},
			contains: []string{"port: 8443", "version 2"}},
		{name: "past revision", o: GetOptions{Query: Query{Target: "svc/get/web"}, Rev: oldRev},
			contains: []string{"port: 80\n", fmt.Sprintf("read at %d", oldRev)}, absent: []string{"8443"}},
		{name: "secret redacted", o: GetOptions{Query: Query{Target: "secret/get/db"}},
			contains: []string{"password: <redacted, 7 bytes>", "2 secret values redacted: --show-secrets shows them"}, absent: []string{"aHVudGVyMQ=="}},
		{name: "secret shown", o: GetOptions{Query: Query{Target: "secret/get/db", Decode: DecodeOptions{ShowSecrets: true}}},
			contains: []string{"password: aHVudGVyMQ=="}, absent: []string{"redacted"}},
		{name: "custom resource JSON", o: GetOptions{Query: Query{Target: "widgets.example.com/get/w1"}},
			contains: []string{"JSON example.com/v1 Widget", "size: 3"}},
		{name: "custom resource definition", o: GetOptions{Query: Query{Target: "crd/widgets.get.example.com"}},
			contains: []string{"JSON apiextensions.k8s.io/v1beta1 CustomResourceDefinition", "kind: CustomResourceDefinition", "plural: widgets", "openAPIV3Schema:"}},
		{name: "API service", o: GetOptions{Query: Query{Target: "apiservice/v1.get.example.com"}},
			contains: []string{"JSON apiregistration.k8s.io/v1 APIService", "group: get.example.com", "groupPriorityMinimum: 17800"}},
		{name: "encrypted", o: GetOptions{Query: Query{Target: "secrets/get/sealed"}},
			contains: []string{"encrypted with the aesgcm provider (key v1:key2)"}, absent: []string{"kind:"}},
		{name: "garbage", o: GetOptions{Query: Query{Target: "cm/get/garbage"}},
			contains: []string{"binary, 4 bytes: deadbeef"}},
		{name: "ignored fields", o: GetOptions{Query: Query{Target: "pods/get/web-1", Decode: DecodeOptions{Ignore: mustPaths(t, "metadata.managedFields,status")}}},
			contains: []string{"kind: Pod"}, absent: []string{"managedFields", "podIP"}},
		{name: "missing key", o: GetOptions{Query: Query{Target: "pods/get/nope"}}, wantErr: ErrNotFound, errText: "key not found: /registry/pods/get/nope at revision"},
		{name: "missing in this namespace names the others", o: GetOptions{Query: Query{Target: "pods/web-1"}}, wantErr: ErrNotFound,
			errText: `pods named "web-1" exist in namespace get-other, get, ls: name it as pods/get-other/web-1`},
		{name: "a prefix is not a key", o: GetOptions{Query: Query{Target: "/registry/pods/get"}}, wantErr: ErrNotFound, errText: "it is a prefix of 2 keys"},
		{name: "future revision", o: GetOptions{Query: Query{Target: "pods/get/web-1"}, Rev: 1 << 40}, wantErr: ErrFutureRevision, errText: "is in the future: etcd is at revision"},
		{name: "not there yet at a past revision", o: GetOptions{Query: Query{Target: "pods/get-other/web-1"}, Rev: oldRev}, wantErr: ErrNotFound, errText: fmt.Sprintf("at revision %d (now", oldRev)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tc.o.Conn, tc.o.Out = conn(), &out
			if wantErrIs(t, Get(context.Background(), tc.o), tc.wantErr, tc.errText) {
				return
			}
			for _, want := range tc.contains {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			for _, bad := range tc.absent {
				if strings.Contains(out.String(), bad) {
					t.Errorf("output has %q:\n%s", bad, out.String())
				}
			}
		})
	}

	for _, format := range []output.Format{output.JSON, output.YAML} {
		t.Run(string(format), func(t *testing.T) {
			var out bytes.Buffer
			if err := Get(context.Background(), GetOptions{Query: Query{Conn: conn(), Target: "cm/get/settings", Format: format, Out: &out}}); err != nil {
				t.Fatal(err)
			}
			var got struct {
				Resource, Namespace, Name string
				ModRevision               int64
				Value                     struct {
					Encoding string
					Kind     string
					Object   map[string]any
				}
			}
			if err := yaml.Unmarshal(out.Bytes(), &got); err != nil { // JSON is YAML too
				t.Fatalf("%v: %s", err, out.String())
			}
			data, _ := got.Value.Object["data"].(map[string]any)
			if got.Resource != "configmaps" || got.Name != "settings" || got.Value.Encoding != "protobuf" || got.Value.Kind != "ConfigMap" || data["index"] != "4" {
				t.Errorf("unexpected: %s", out.String())
			}
		})
	}
}

func TestWatch(t *testing.T) {
	cli := client(t)
	loadNamespace(t, cli, "watch")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncbuf.Buffer
	var log notes
	from := rev(t, cli) + 1 // the next revision: valid, etcd waits for it
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, WatchOptions{Query: Query{Conn: conn(), Namespace: "watch", Out: &out, Log: &log, Decode: DecodeOptions{Ignore: mustPaths(t, "metadata.managedFields")}}, FromRev: from, Exclude: DefaultExclude})
	}()
	waitFor(t, "the watch to start", func() bool { return strings.Contains(log.String(), fmt.Sprintf("from revision %d", from)) })

	cm := etcdtest.ConfigMap("watch", "new", 9)
	put(t, cli, "/registry/configmaps/watch/new", etcdtest.MustEncode(cm))
	svc := etcdtest.Service("watch", "web", 3)
	svc.Spec.Type = "NodePort"
	svc.Spec.Ports[0].NodePort = 30080
	svc.ManagedFields[0].Manager = "kubectl-patch" // ignored: must not show
	svcRev := put(t, cli, "/registry/services/specs/watch/web", etcdtest.MustEncode(svc))
	svc.Spec.Ports[0].NodePort = 30081 // diffed against the cached rendering of svcRev
	svcRev2 := put(t, cli, "/registry/services/specs/watch/web", etcdtest.MustEncode(svc))
	put(t, cli, "/registry/leases/watch/leader", etcdtest.MustEncode(etcdtest.Lease("watch", "leader", 8)))
	put(t, cli, "/registry/configmaps/elsewhere/x", etcdtest.MustEncode(etcdtest.ConfigMap("elsewhere", "x", 1)))
	sameValue := etcdtest.MustEncode(etcdtest.ConfigMap("watch", "settings", 4))
	put(t, cli, "/registry/configmaps/watch/settings", sameValue)
	delRev := del(t, cli, "/registry/configmaps/watch/new")

	waitFor(t, "the delete event", func() bool { return strings.Contains(out.String(), "DELETED configmaps watch/new") })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch returned %v", err)
	}
	got := out.String()
	for _, want := range []string{
		fmt.Sprintf("ADDED configmaps watch/new (revision %d)\n--- /registry/configmaps/watch/new (absent)\n+++ /registry/configmaps/watch/new @%d\n", from, from),
		"+  index: \"9\"\n",
		fmt.Sprintf("MODIFIED services watch/web (revision %d -> %d)\n", from-1, svcRev),
		"-  type: ClusterIP\n+  type: NodePort\n",
		"+    nodePort: 30080\n",
		fmt.Sprintf("MODIFIED services watch/web (revision %d -> %d)\n", svcRev, svcRev2),
		"-    nodePort: 30080\n+    nodePort: 30081\n",
		"MODIFIED configmaps watch/settings",
		"# written with the same value\n",
		fmt.Sprintf("DELETED configmaps watch/new (revision %d -> %d)\n", from, delRev),
		"-kind: ConfigMap\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("watch output lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"leases", "elsewhere", "kubectl-patch", "managedFields"} {
		if strings.Contains(got, bad) {
			t.Errorf("watch output has %q:\n%s", bad, got)
		}
	}
	if n := len(regexp.MustCompile(`(?m)^(ADDED|MODIFIED|DELETED) `).FindAllString(got, -1)); n != 5 {
		t.Errorf("%d events printed, want 5:\n%s", n, got)
	}
}

func TestWatchFromTheFuture(t *testing.T) {
	cli := client(t)
	future := rev(t, cli) + 5
	err := Watch(context.Background(), WatchOptions{Query: Query{Conn: conn(), Out: io.Discard}, FromRev: future})
	if !errors.Is(err, ErrFutureRevision) || !strings.Contains(err.Error(), fmt.Sprintf("revision %d is in the future", future)) {
		t.Fatalf("err = %v, want a future revision error", err)
	}
}

func TestWatchJSON(t *testing.T) {
	cli := client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncbuf.Buffer
	from := rev(t, cli) + 1
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, WatchOptions{Query: Query{Conn: conn(), Target: "leases/watch-json", Format: output.JSON, Out: &out}, FromRev: from, Exclude: DefaultExclude})
	}()
	put(t, cli, "/registry/leases/watch-json/l", etcdtest.MustEncode(etcdtest.Lease("watch-json", "l", 1)))
	waitFor(t, "the lease event (named, so not excluded)", func() bool { return strings.Contains(out.String(), "\n") })
	cancel()
	<-done
	var c struct {
		Type, Resource, Namespace, Name string
		After                           struct{ Kind string }
		Diff                            string
	}
	if err := json.Unmarshal([]byte(strings.SplitN(out.String(), "\n", 2)[0]), &c); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if c.Type != "ADDED" || c.Resource != "leases" || c.Name != "l" || c.After.Kind != "Lease" || !strings.Contains(c.Diff, "+    \"holderIdentity\": \"holder-1\",\n") {
		t.Errorf("unexpected event: %s", out.String())
	}
}

func TestDiff(t *testing.T) {
	cli := client(t)
	loadNamespace(t, cli, "diff")
	exe := helperCommand // the test binary acting as kubectl

	type check struct {
		contains []string
		absent   []string
	}
	tests := []struct {
		name    string
		o       DiffOptions
		before  func(t *testing.T) // runs after the "from" revision is taken (--since-rev cases)
		want    check
		notes   string
		wantErr string
	}{
		{
			name: "command adds a configmap and patches a service",
			o: DiffOptions{Query: Query{Target: "", Namespace: "diff"}, Command: exe(
				"put-configmap:/registry/configmaps/diff/from-helper",
				"put-service:/registry/services/specs/diff/web:8080")},
			want: check{contains: []string{
				"# 2 keys changed under /registry/ between revision",
				"ADDED configmaps diff/from-helper (revision ",
				"+kind: ConfigMap\n",
				"MODIFIED services diff/web (revision ",
				"   - name: http\n-    port: 80\n+    port: 8080\n",
			}, absent: []string{"leases", "DELETED"}},
		},
		{
			name: "since a revision, folding several writes per key",
			o:    DiffOptions{Query: Query{Namespace: "diff"}, Exclude: DefaultExclude},
			before: func(t *testing.T) {
				put(t, cli, "/registry/configmaps/diff/tmp", etcdtest.MustEncode(etcdtest.ConfigMap("diff", "tmp", 1)))
				put(t, cli, "/registry/configmaps/diff/tmp", etcdtest.MustEncode(etcdtest.ConfigMap("diff", "tmp", 2)))
				del(t, cli, "/registry/configmaps/diff/tmp")
				del(t, cli, "/registry/pods/diff/web-2")
				put(t, cli, "/registry/leases/diff/leader", etcdtest.MustEncode(etcdtest.Lease("diff", "leader", 99)))
				s := etcdtest.Secret("diff", "db", 1)
				s.Data["password"] = []byte("hunter3")
				put(t, cli, "/registry/secrets/diff/db", etcdtest.MustEncode(s))
				put(t, cli, "/registry/configmaps/other-ns/x", []byte("{}"))
			},
			want: check{contains: []string{
				"# 3 keys changed",
				"ADDED+DELETED configmaps diff/tmp (revision ",
				", 3 writes)\n# created and deleted between the two revisions",
				"DELETED pods diff/web-2 (revision ",
				"-kind: Pod\n",
				"MODIFIED secrets diff/db (revision ",
				"# the value changed only where devk does not show it",
			}, absent: []string{"leases/", "leader", "other-ns", "hunter"}},
			notes: "left out 1 writes to leases",
		},
		{
			name: "a resource target keeps only its keys",
			o:    DiffOptions{Query: Query{Target: "svc/diff"}},
			before: func(t *testing.T) {
				put(t, cli, "/registry/configmaps/diff/ignored", []byte("{}"))
				s := etcdtest.Service("diff", "web", 3)
				s.Spec.Ports[0].Port = 9090
				put(t, cli, "/registry/services/specs/diff/web", etcdtest.MustEncode(s))
			},
			want: check{contains: []string{"# 1 key changed under /registry/services/specs/diff/", "+    port: 9090\n"}, absent: []string{"ignored"}},
		},
		{
			name:   "no change",
			o:      DiffOptions{Query: Query{Target: "pods/diff"}, Command: exe()},
			want:   check{contains: []string{"# no keys changed under /registry/pods/diff/ between revision"}},
			before: nil,
		},
		{
			name:    "failing command still shows its changes",
			o:       DiffOptions{Query: Query{Target: "cm/diff"}, Command: exe("put-configmap:/registry/configmaps/diff/half-done", "exit:3")},
			want:    check{contains: []string{"ADDED configmaps diff/half-done"}},
			wantErr: "exit status 3; the diff above is what it changed before failing",
		},
		{
			name:    "command not found",
			o:       DiffOptions{Command: []string{"/nonexistent/kubectl", "get", "pods"}},
			wantErr: "/nonexistent/kubectl get pods: fork/exec /nonexistent/kubectl: no such file or directory",
		},
		{
			name:    "unknown exclude",
			o:       DiffOptions{Command: exe(), Exclude: []string{"leasez"}},
			wantErr: "did you mean leases",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, cmdOut bytes.Buffer
			var log notes
			tc.o.Conn, tc.o.Out, tc.o.CommandOut, tc.o.Log = conn(), &out, &cmdOut, &log
			if tc.before != nil {
				tc.o.SinceRev = rev(t, cli)
				tc.before(t)
			}
			if len(tc.o.Command) > 0 && tc.o.Command[0] == helperCommand()[0] {
				t.Setenv(helperEnv, testEtcd.Endpoint)
			}
			err := Diff(context.Background(), tc.o)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatalf("%v (command output %q)", err, cmdOut.String())
			}
			for _, want := range tc.want.contains {
				if !strings.Contains(out.String(), want) {
					t.Errorf("diff lacks %q:\n%s", want, out.String())
				}
			}
			for _, bad := range tc.want.absent {
				if strings.Contains(out.String(), bad) {
					t.Errorf("diff has %q:\n%s", bad, out.String())
				}
			}
			if !strings.Contains(log.String(), tc.notes) {
				t.Errorf("notes lack %q: %s", tc.notes, log.String())
			}
			ran := tc.wantErr == "" || strings.Contains(tc.wantErr, "exit status")
			if ran && len(tc.o.Command) > 0 && tc.o.Command[0] == helperCommand()[0] && !strings.Contains(cmdOut.String(), "helper: writing to etcd") {
				t.Errorf("the command's output did not reach CommandOut: %q", cmdOut.String())
			}
		})
	}
}

func TestDiffWaitsForEnter(t *testing.T) {
	cli := client(t)
	stdinR, stdinW := io.Pipe()
	var out bytes.Buffer
	var log notes
	done := make(chan error, 1)
	go func() {
		done <- Diff(context.Background(), DiffOptions{Query: Query{Conn: conn(), Target: "cm/enter", Out: &out, Log: &log}, Stdin: stdinR})
	}()
	waitFor(t, "the Enter prompt", func() bool { return strings.Contains(log.String(), "press Enter") })
	put(t, cli, "/registry/configmaps/enter/a", etcdtest.MustEncode(etcdtest.ConfigMap("enter", "a", 1)))
	select {
	case err := <-done:
		t.Fatalf("diff returned before Enter: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	fmt.Fprintln(stdinW)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "# 1 key changed") || !strings.Contains(out.String(), "ADDED configmaps enter/a") {
		t.Errorf("unexpected diff:\n%s", out.String())
	}
}

func TestDiffAction(t *testing.T) {
	cli := client(t)
	var out bytes.Buffer
	err := Diff(context.Background(), DiffOptions{Query: Query{Conn: conn(), Target: "cm/action", Out: &out}, Action: func(ctx context.Context) error {
		_, err := cli.Put(ctx, "/registry/configmaps/action/a", string(etcdtest.MustEncode(etcdtest.ConfigMap("action", "a", 1))))
		return err
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "# 1 key changed") || !strings.Contains(out.String(), "ADDED configmaps action/a") {
		t.Errorf("unexpected diff:\n%s", out.String())
	}
	err = Diff(context.Background(), DiffOptions{Query: Query{Conn: conn(), Out: &out}, Action: func(context.Context) error { return errors.New("boom") }})
	if err == nil || !strings.Contains(err.Error(), "the change failed: boom") {
		t.Errorf("err = %v, want the action's failure", err)
	}
}

func TestDiffJSON(t *testing.T) {
	cli := client(t)
	from := rev(t, cli)
	put(t, cli, "/registry/configmaps/json/a", etcdtest.MustEncode(etcdtest.ConfigMap("json", "a", 1)))
	var out bytes.Buffer
	if err := Diff(context.Background(), DiffOptions{Query: Query{Conn: conn(), Target: "cm/json", Format: output.JSON, Out: &out}, SinceRev: from}); err != nil {
		t.Fatal(err)
	}
	var res DiffResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if res.FromRevision != from || len(res.Changes) != 1 || res.Changes[0].Type != Added || res.Changes[0].After == nil ||
		res.Changes[0].After.Kind != "ConfigMap" || !strings.Contains(res.Changes[0].Diff, "+    \"index\": \"1\"") {
		t.Errorf("unexpected: %s", out.String())
	}
}

// TestCompaction runs its own etcd: compacting the shared one would take
// history from other tests.
func TestCompaction(t *testing.T) {
	srv, cli := etcdtest.StartT(t)
	key := "/registry/configmaps/default/c"
	r1 := put(t, cli, key, etcdtest.MustEncode(etcdtest.ConfigMap("default", "c", 1)))
	r2 := put(t, cli, key, etcdtest.MustEncode(etcdtest.ConfigMap("default", "c", 2)))
	for i := 3; i < 8; i++ {
		put(t, cli, key, etcdtest.MustEncode(etcdtest.ConfigMap("default", "c", i)))
	}
	if _, err := cli.Compact(context.Background(), r2); err != nil {
		t.Fatal(err)
	}
	current := rev(t, cli)
	c := ConnOptions{Endpoints: []string{srv.Endpoint}, Home: "/nonexistent", KubeadmDir: "/nonexistent"}
	keeps := fmt.Sprintf("etcd keeps revisions %d to %d", r2, current)

	if got, err := oldestRevision(context.Background(), cli, current); err != nil || got != r2 {
		t.Errorf("oldestRevision = %d, %v; want %d", got, err, r2)
	}
	tests := []struct {
		name string
		run  func() error
		want []string
	}{
		{"get", func() error {
			return Get(context.Background(), GetOptions{Query: Query{Conn: c, Target: key, Out: io.Discard}, Rev: r1})
		}, []string{fmt.Sprintf("revision %d has been compacted", r1), keeps, "every 5 minutes"}},
		{"ls", func() error {
			return Ls(context.Background(), LsOptions{Query: Query{Conn: c, Out: io.Discard}, Rev: r1})
		}, []string{keeps}},
		{"watch", func() error {
			return Watch(context.Background(), WatchOptions{Query: Query{Conn: c, Out: io.Discard}, FromRev: r1})
		}, []string{keeps}},
		{"diff", func() error {
			return Diff(context.Background(), DiffOptions{Query: Query{Conn: c, Out: io.Discard}, SinceRev: r1})
		}, []string{keeps, fmt.Sprintf("`devk etcd diff --since-rev %d` shows what changed since the oldest revision", r2)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.run()
			if !errors.Is(err, ErrCompacted) {
				t.Fatalf("err = %v, want ErrCompacted", err)
			}
			var re *RevisionError
			if !errors.As(err, &re) || re.Oldest != r2 || re.Current != current {
				t.Errorf("revision error %+v, want oldest %d current %d", re, r2, current)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q: %v", w, err)
				}
			}
		})
	}

	t.Run("what can still be shown", func(t *testing.T) {
		var out bytes.Buffer
		if err := Diff(context.Background(), DiffOptions{Query: Query{Conn: c, Out: &out}, SinceRev: r2}); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), fmt.Sprintf("MODIFIED configmaps default/c (revision %d -> %d, 5 writes)", r2, current)) {
			t.Errorf("unexpected diff:\n%s", out.String())
		}
	})
}

func TestConnectErrors(t *testing.T) {
	// a port nothing listens on: take one, then free it
	srv, err := etcdtest.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	closed := srv.Endpoint
	srv.Close()

	ctx := context.Background()
	_, err = Connect(ctx, ConnOptions{Endpoints: []string{closed}, DialTimeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "cannot reach 127.0.0.1:") || !strings.Contains(err.Error(), "is etcd running") {
		t.Errorf("err = %v, want a cannot-reach explanation", err)
	}
	_, err = Connect(ctx, ConnOptions{Endpoints: []string{"https://127.0.0.1:1"}, CACert: "/nonexistent/ca.crt"})
	if err == nil || !strings.Contains(err.Error(), "read etcd CA /nonexistent/ca.crt") {
		t.Errorf("err = %v, want the CA file named", err)
	}
}

func TestHelperIsRealCommand(t *testing.T) {
	// the diff tests rely on the helper writing through its own etcd
	// client; make sure it fails loudly when pointed nowhere
	cmd := exec.Command(helperCommand()[0], "exit:4")
	cmd.Env = append(cmd.Environ(), helperEnv+"="+testEtcd.Endpoint)
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 {
		t.Fatalf("helper exit = %v, want status 4", err)
	}
}

// wantErrIs checks a table case's error: with want set, err must be it
// and say text, and wantErrIs returns true (the case ends there); with
// want nil, any error fails t.
func wantErrIs(t *testing.T, err, want error, text string) bool {
	t.Helper()
	if want != nil {
		if !errors.Is(err, want) || !strings.Contains(err.Error(), text) {
			t.Fatalf("err = %v, want %v with %q", err, want, text)
		}
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return false
}
