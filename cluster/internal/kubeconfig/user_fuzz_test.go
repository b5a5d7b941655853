package kubeconfig

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// FuzzKubeconfigMerge: `devk up` adds its context to the user's
// kubeconfig, whatever that file holds, and `devk down` takes it out.
// Whatever the bytes: nothing panics; a file client-go cannot read, and
// any merge that fails, is left exactly as it was; a merge that succeeds
// leaves a file client-go reads, with devk's context current and every
// other context, cluster, user and preference of the user's unchanged; a
// second merge changes nothing; and removing devk's context gives back
// the user's entries unchanged.
func FuzzKubeconfigMerge(f *testing.F) {
	for _, seed := range []string{
		"",
		"{}",
		"apiVersion: v1\nkind: layout.Config\nclusters:\n- name: prod\n  cluster:\n    server: https://prod.example:6443\n    certificate-authority: ../ca.crt\ncontexts:\n- name: prod\n  context:\n    cluster: prod\n    user: prod\n    namespace: web\ncurrent-context: prod\npreferences:\n  colors: true\nusers:\n- name: prod\n  user:\n    token: t0ken\n",
		"apiVersion: v1\nkind: layout.Config\ncontexts:\n- name: devk-devk\n  context:\n    cluster: elsewhere\n    user: me\n- name: other\n  context:\n    cluster: devk-devk\n    user: devk-devk\ncurrent-context: devk-devk\n",
		"apiVersion: v1\nkind: layout.Config\nusers:\n- name: exec\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: get-token\n      args: [--x]\n      interactiveMode: Never\nextensions:\n- name: ext\n  extension:\n    a: [1, 2]\n",
		`{"apiVersion":"v1","kind":"Config","contexts":[{"name":"a","context":{"cluster":"a","user":"a"}}],"current-context":"a"}`,
		"apiVersion: v1\nkind: layout.Config\ncontexts: null\nclusters:\n- name: x\n",
		"apiVersion: v2\nkind: layout.Config\n",
		"\x00\x01 not yaml: [",
	} {
		f.Add([]byte(seed))
	}
	u, admin := fuzzUser(f)
	path := u.Path
	name := ContextName(testCluster)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		before, loadErr := clientcmd.Load(data)
		_, err := u.MergeAdmin(ctx, testCluster, admin)
		after := readFile(t, path)
		if loadErr != nil && err == nil {
			t.Fatalf("client-go cannot read the file (%v), yet the merge succeeded and wrote:\n%s", loadErr, after)
		}
		if err != nil {
			if !bytes.Equal(after, data) {
				t.Fatalf("the merge failed (%v) and changed the file:\n%q\nto\n%q", err, data, after)
			}
			return
		}
		merged, err := clientcmd.Load(after)
		if err != nil {
			t.Fatalf("the merged file does not load: %v\n%s", err, after)
		}
		if merged.CurrentContext != name || merged.Contexts[name] == nil || merged.Clusters[name] == nil || merged.AuthInfos[name] == nil ||
			merged.Contexts[name].Cluster != name || merged.Contexts[name].AuthInfo != name {
			t.Fatalf("the merged file lacks context %s or does not use it:\n%s", name, after)
		}
		if diff := usersEntries(before, name, merged); diff != "" {
			t.Fatalf("the merge changed the user's %s:\n%s\nbecame\n%s", diff, data, after)
		}

		if _, err := u.MergeAdmin(ctx, testCluster, admin); err != nil {
			t.Fatalf("a second merge fails: %v", err)
		}
		if again := readFile(t, path); !bytes.Equal(again, after) {
			t.Fatalf("a second merge rewrote the file:\n%s\nto\n%s", after, again)
		}

		if _, err := u.RemoveContext(ctx, testCluster); err != nil {
			t.Fatalf("removing context %s fails: %v", name, err)
		}
		removed, err := clientcmd.Load(readFile(t, path))
		if err != nil {
			t.Fatalf("the file does not load after removing context %s: %v", name, err)
		}
		if removed.Contexts[name] != nil || removed.Clusters[name] != nil || removed.AuthInfos[name] != nil {
			t.Fatalf("context %s is still there after its removal", name)
		}
		if diff := usersEntries(before, name, removed); diff != "" {
			t.Fatalf("removing context %s changed the user's %s", name, diff)
		}
	})
}

// usersEntries names what of the user's own (every entry but devk's, the
// current context aside) differs between want and got, or "".
func usersEntries(want *clientcmdapi.Config, devk string, got *clientcmdapi.Config) string {
	strip := func(cfg *clientcmdapi.Config) *clientcmdapi.Config {
		cfg = cfg.DeepCopy()
		delete(cfg.Contexts, devk)
		delete(cfg.Clusters, devk)
		delete(cfg.AuthInfos, devk)
		cfg.CurrentContext = ""
		return cfg
	}
	w, g := strip(want), strip(got)
	switch {
	case !reflect.DeepEqual(w.Contexts, g.Contexts):
		return "contexts"
	case !reflect.DeepEqual(w.Clusters, g.Clusters):
		return "clusters"
	case !reflect.DeepEqual(w.AuthInfos, g.AuthInfos):
		return "users"
	case !reflect.DeepEqual(w.Preferences, g.Preferences):
		return "preferences"
	case !reflect.DeepEqual(w.Extensions, g.Extensions):
		return "extensions"
	}
	return ""
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fuzzUser is a user's kubeconfig and an admin.conf to merge into it,
// for every input of a fuzz run: under /dev/shm when there is one, since
// each input writes (and fsyncs) the user's kubeconfig.
func fuzzUser(f *testing.F) (User, string) {
	f.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "devk-fuzz-")
	if err != nil {
		dir = f.TempDir()
	} else {
		f.Cleanup(func() { os.RemoveAll(dir) })
	}
	u, admin := user(f, dir)
	if err := os.MkdirAll(filepath.Dir(u.Path), 0o700); err != nil {
		f.Fatal(err)
	}
	return u, admin
}
