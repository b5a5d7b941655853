package etcdcmd

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/devk/devk/cmd/devk/internal/clitest"
	"github.com/devk/devk/etcdwatch/etcdtest"
	"github.com/devk/devk/internal/syncbuf"
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
			_, _, err := clitest.Run(t, NewEtcdCmd, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}

func TestEtcdHelpTeaches(t *testing.T) {
	for _, sub := range []string{"ls", "get", "watch", "diff"} {
		out, _, err := clitest.Run(t, NewEtcdCmd, "etcd", sub, "--help")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out, "Examples:\n  devk etcd "+sub) {
			t.Errorf("etcd %s --help has no examples:\n%s", sub, out)
		}
		for _, flag := range []string{"--endpoints", "--cacert", "--name"} {
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
			out, _, err := clitest.Run(t, NewEtcdCmd, args...)
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

// TestEtcdCommandTimeout: an etcd that answers the connection check and
// then goes silent fails each command after --command-timeout, naming the
// endpoint and the flag, instead of hanging it. Watch is checked on its
// initial read (--from-rev) and on opening its watch, not on its stream.
func TestEtcdCommandTimeout(t *testing.T) {
	srv, cli := etcdtest.StartT(t)
	if _, err := cli.Put(context.Background(), "/registry/configmaps/default/x", string(etcdtest.MustEncode(etcdtest.ConfigMap("default", "x", 1)))); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DEVK_HOME", t.TempDir())
	const timeout = 700 * time.Millisecond
	tests := []struct {
		name string
		args []string
		// calls etcd answers (the connection check is one) before it
		// stops answering
		calls int
	}{
		{"get", []string{"etcd", "get", "cm/default/x"}, 1},
		{"ls", []string{"etcd", "ls"}, 1},
		{"ls count", []string{"etcd", "ls", "--count"}, 1},
		{"diff since a revision", []string{"etcd", "diff", "--since-rev", "1"}, 1},
		{"diff opening its watch", []string{"etcd", "diff", "--", "true"}, 1},
		{"diff after the command", []string{"etcd", "diff", "--", "true"}, 2},
		{"watch from a revision", []string{"etcd", "watch", "--from-rev", "1"}, 1},
		{"watch opening its watch", []string{"etcd", "watch"}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ep := etcdtest.StallAfterT(t, srv.Endpoint, tc.calls)
			// flags before any --, which ends devk's flags
			at := len(tc.args)
			if i := slices.Index(tc.args, "--"); i >= 0 {
				at = i
			}
			args := slices.Concat(tc.args[:at], []string{"--endpoints", ep, "--command-timeout", timeout.String()}, tc.args[at:])
			start := time.Now()
			_, _, err := clitest.Run(t, NewEtcdCmd, args...)
			took := time.Since(start)
			if err == nil {
				t.Fatal("no error from an etcd that does not answer")
			}
			for _, want := range []string{"etcd " + ep + " did not answer within --command-timeout 700ms", "or raise --command-timeout"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q: %v", want, err)
				}
			}
			if took < timeout || took > timeout+3*time.Second {
				t.Errorf("returned after %s, want about %s", took, timeout)
			}
		})
	}
}

// secretFixture is a Secret stored in etcd in one of the forms the
// decoder meets, written twice so that watch and diff show a change.
type secretFixture struct {
	name string
	// value holds plain, the secret, in the form under test.
	value func(plain string) []byte
}

var secretFixtures = []secretFixture{
	{"proto", func(plain string) []byte {
		return etcdtest.MustEncode(leakSecret("proto", plain))
	}},
	{"applied", func(plain string) []byte {
		// kubectl apply keeps the whole object, data included, in an
		// annotation
		s := leakSecret("applied", plain)
		s.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": fmt.Sprintf(`{"apiVersion":"v1","data":{"password":%q},"kind":"Secret"}`, base64.StdEncoding.EncodeToString([]byte(plain+"-applied")))}
		return etcdtest.MustEncode(s)
	}},
	{"json", func(plain string) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"json","namespace":"leak"},"data":{"password":%q},"stringData":{"token":%q}}`,
			base64.StdEncoding.EncodeToString([]byte(plain)), plain+"-string")
	}},
	{"broken-json", func(plain string) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"broken-json"},"stringData":{"password":%q}`, plain)
	}},
	{"truncated-proto", func(plain string) []byte {
		b := etcdtest.MustEncode(leakSecret("truncated-proto", plain))
		return b[:len(b)-3] // into the type field, after the data
	}},
	{"binary", func(plain string) []byte {
		return append([]byte{0xff, 0x00}, plain...)
	}},
}

func leakSecret(name, plain string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "leak"},
		Data:       map[string][]byte{"password": []byte(plain)},
		Type:       corev1.SecretTypeOpaque,
	}
}

// secretPlain is the secret of fixture f's write n (1 or 2).
func secretPlain(f secretFixture, n int) string { return fmt.Sprintf("%s-s3cret-%d", f.name, n) }

// leaks lists how a secret could show in output: as it is, in base64
// (data, JSON output), in hex (a value's preview).
func leaks(plain string) []string {
	var out []string
	for _, p := range []string{plain, plain + "-applied", plain + "-string"} {
		out = append(out, p, base64.StdEncoding.EncodeToString([]byte(p)), hex.EncodeToString([]byte(p)))
	}
	return out
}

// TestEtcdNeverPrintsSecrets runs get, watch and diff, in text and JSON,
// with every --ignore that touches what redaction looks at, against
// Secrets stored as protobuf, with a last-applied annotation, as JSON, and
// in forms that do not decode: no secret may show in any output.
func TestEtcdNeverPrintsSecrets(t *testing.T) {
	srv, cli := etcdtest.StartT(t)
	ctx := context.Background()
	t.Setenv("DEVK_HOME", t.TempDir())
	var forbidden []string
	write := func(n int) int64 {
		var rev int64
		for _, f := range secretFixtures {
			resp, err := cli.Put(ctx, "/registry/secrets/leak/"+f.name, string(f.value(secretPlain(f, n))))
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
			forbidden = append(forbidden, leaks(secretPlain(f, n))...)
		}
		return rev
	}
	start := write(1) - int64(len(secretFixtures)) // before the first write
	mid := write(2)                                // between the two

	ignores := []string{"", "kind", "apiVersion", "kind,apiVersion", "metadata", "metadata.annotations",
		"metadata.annotations.kubectl.kubernetes.io/last-applied-configuration", "data", "data.password", "stringData", "type", "metadata.managedFields"}
	type run struct {
		name string
		args []string
		// events is how many changes a watch prints before it is stopped
		events int
		// shows is an object the output must name
		shows string
	}
	var runs []run
	for _, f := range secretFixtures {
		runs = append(runs, run{name: "get " + f.name, args: []string{"etcd", "get", "secret/leak/" + f.name}, shows: "leak/" + f.name})
	}
	runs = append(runs,
		run{name: "watch", args: []string{"etcd", "watch", "secrets/leak", "--from-rev", fmt.Sprint(start + 1)}, events: 2 * len(secretFixtures), shows: "leak/binary"},
		run{name: "diff of the creation", args: []string{"etcd", "diff", "secrets/leak", "--since-rev", fmt.Sprint(start)}, shows: "leak/binary"},
		run{name: "diff of the change", args: []string{"etcd", "diff", "secrets/leak", "--since-rev", fmt.Sprint(mid - int64(len(secretFixtures)))}, shows: "leak/binary"},
	)
	for _, r := range runs {
		for _, format := range []string{"text", "json"} {
			for _, ignore := range ignores {
				t.Run(fmt.Sprintf("%s -o %s --ignore %q", r.name, format, ignore), func(t *testing.T) {
					args := append(append([]string{}, r.args...), "--endpoints", srv.Endpoint, "-o", format, "--ignore", ignore)
					out := runUntil(t, args, r.events)
					if !strings.Contains(out, r.shows) {
						t.Fatalf("output does not show %s:\n%s", r.shows, out)
					}
					for _, leak := range forbidden {
						if strings.Contains(out, leak) {
							t.Errorf("output shows %q:\n%s", leak, out)
						}
					}
				})
			}
		}
	}

	// the check above would see a secret that shows
	out := runUntil(t, []string{"etcd", "get", "secret/leak/proto", "--endpoints", srv.Endpoint, "-o", "json", "--show-secrets"}, 0)
	if want := base64.StdEncoding.EncodeToString([]byte(secretPlain(secretFixtures[0], 2))); !strings.Contains(out, want) {
		t.Errorf("--show-secrets output lacks %q:\n%s", want, out)
	}
}

// How long runUntil waits for a watch's changes, and how often it looks.
const (
	etcdWatchTimeout = 20 * time.Second
	etcdWatchPoll    = 10 * time.Millisecond
)

// runUntil runs devk and returns its output; a watch (events > 0) is
// stopped once it has printed that many changes.
func runUntil(t *testing.T, args []string, events int) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncbuf.Buffer
	cmd := clitest.Root(&out, &errb, args, NewEtcdCmd)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	if events > 0 {
		err := wait.PollUntilContextTimeout(ctx, etcdWatchPoll, etcdWatchTimeout, true, func(context.Context) (bool, error) {
			select {
			case err := <-done:
				return false, fmt.Errorf("watch ended: %v\n%s", err, errb.String())
			default:
				return changes(out.String()) >= events, nil
			}
		})
		if err != nil {
			t.Fatalf("%v: %d changes, want %d:\n%s", err, changes(out.String()), events, out.String())
		}
		cancel()
	}
	if err := <-done; err != nil {
		t.Fatalf("%v\n%s", err, errb.String())
	}
	return out.String()
}

// changes counts the changes a watch printed, in text or JSON.
func changes(out string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "ADDED ") || strings.HasPrefix(line, "MODIFIED ") || strings.HasPrefix(line, `{"type":`) {
			n++
		}
	}
	return n
}
