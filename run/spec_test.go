package run

import (
	"os"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/staticpod"
)

const binary = "/tree/_output/local/bin/linux/amd64/kube-scheduler"

func scheduler(t *testing.T) build.Component {
	t.Helper()
	c, err := build.Lookup("scheduler")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// manifest is testdata's scheduler manifest, changed by edit.
func manifest(t *testing.T, edit func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	data, err := os.ReadFile("testdata/kube-scheduler.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pod, err := staticpod.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(pod)
	}
	return pod
}

func TestCommand(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(*corev1.Pod)
		want    Spec
		wantErr string
	}{
		{name: "the manifest's command after its first word, then its args, the tree's binary first",
			want: Spec{Argv: []string{binary, "--kubeconfig=/home/u/.devk/clusters/devk/scheduler.conf", "--bind-address=10.250.0.2", "--secure-port=10259", "--v=2"},
				Env: []string{"GOMAXPROCS=2"}, Dir: "/"}},
		{name: "no command: the image's entrypoint, which is the binary",
			edit: func(p *corev1.Pod) { p.Spec.Containers[0].Command, p.Spec.Containers[0].Env = nil, nil },
			want: Spec{Argv: []string{binary, "--v=2"}, Dir: "/"}},
		{name: "a command by its path",
			edit: func(p *corev1.Pod) {
				c := &p.Spec.Containers[0]
				c.Command, c.Args, c.WorkingDir = []string{"/usr/local/bin/kube-scheduler", "--v=3"}, nil, "/var/run"
			},
			want: Spec{Argv: []string{binary, "--v=3"}, Env: []string{"GOMAXPROCS=2"}, Dir: "/var/run"}},
		{name: "a manifest running a debugger",
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[0].Command = []string{"dlv", "exec", "--", "/usr/local/bin/kube-scheduler"}
			},
			wantErr: `runs "dlv exec -- /usr/local/bin/kube-scheduler", not kube-scheduler`},
		{name: "a manifest devk debug wrote",
			edit: func(p *corev1.Pod) {
				p.Annotations = map[string]string{staticpod.DebugAnnotation: `{"name":"kube-scheduler","image":"x"}`}
			},
			wantErr: "runs under `devk debug`: end that first (`devk debug --stop scheduler`)"},
		{name: "env from a secret",
			edit: func(p *corev1.Pod) {
				p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{Key: "t"}}}}
			},
			wantErr: "env TOKEN comes from valueFrom"},
		{name: "a hostPath mounted elsewhere",
			edit:    func(p *corev1.Pod) { p.Spec.Containers[0].VolumeMounts[0].MountPath = "/etc/kubernetes/scheduler.conf" },
			wantErr: "mounts /home/u/.devk/clusters/devk/scheduler.conf at /etc/kubernetes/scheduler.conf"},
		{name: "a volume that is not a hostPath",
			edit: func(p *corev1.Pod) {
				p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
			},
			wantErr: "not a hostPath"},
		{name: "an undeclared volume",
			edit:    func(p *corev1.Pod) { p.Spec.Volumes = nil },
			wantErr: "which it does not declare"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Command(manifest(t, tc.edit), scheduler(t), binary)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Command =\n %#v\nwant\n %#v", got, tc.want)
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, name := range []string{"scheduler", "kube-scheduler", "apiserver", "controller-manager"} {
		if _, err := Lookup(name); err != nil {
			t.Errorf("Lookup(%q): %v", name, err)
		}
	}
	for name, want := range map[string]string{
		"etcd":    "etcd is not a static pod built from the tree",
		"kubelet": "kubelet is not a static pod built from the tree",
		"nope":    `unknown component "nope"`,
		"../x":    "unknown component",
	} {
		_, err := Lookup(name)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "devk run takes apiserver, controller-manager, scheduler") {
			t.Errorf("Lookup(%q) = %v; want an error saying %q and what devk run takes", name, err, want)
		}
	}
}
