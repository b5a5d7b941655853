// Package swap replaces what a node runs: the image of a static pod (by
// rewriting its manifest atomically, with a backup kept outside the
// kubelet's manifests dir) and the kubectl or kubelet binary (by atomic
// rename, keeping PATH.prev). Every replacement can be rolled back.
package swap

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/devk/devk/internal/fileutil"
)

// ErrNoBackup is returned by a rollback with nothing to restore.
var ErrNoBackup = errors.New("no previous manifest to roll back to")

// Manifest is one static pod manifest in a kubelet's manifests dir.
type Manifest struct {
	// Path is the manifest, e.g. /etc/kubernetes/manifests/kube-apiserver.yaml.
	Path string
	// WorkDir holds temp files, backups and the swap journal. It must be
	// outside the manifests dir (the kubelet reads every file there, even
	// an editor's temp file) and on the same filesystem (for rename).
	WorkDir string
}

// ManifestFor names the manifest of a static pod in dir and the work dir
// devk uses beside it: <parent of dir>/.devk-swap.
func ManifestFor(manifestsDir, podName string) Manifest {
	return Manifest{
		Path:    filepath.Join(manifestsDir, podName+".yaml"),
		WorkDir: filepath.Join(filepath.Dir(filepath.Clean(manifestsDir)), ".devk-swap"),
	}
}

func (m Manifest) name() string {
	return strings.TrimSuffix(filepath.Base(m.Path), filepath.Ext(m.Path))
}

// BackupPath is where the manifest before the last swap is kept.
func (m Manifest) BackupPath() string { return filepath.Join(m.WorkDir, m.name()+".yaml.prev") }

// JournalPath records a swap in progress, so an interrupted one can be
// rolled back.
func (m Manifest) JournalPath() string { return filepath.Join(m.WorkDir, m.name()+".swap.json") }

// Journal is what a swap in progress records.
type Journal struct {
	Manifest string    `json:"manifest"`
	Backup   string    `json:"backup"`
	OldImage string    `json:"oldImage"`
	NewImage string    `json:"newImage"`
	Started  time.Time `json:"started"`
}

// interrupted is the error for a swap of pod that did not finish.
func (j *Journal) interrupted(pod string) error {
	return fmt.Errorf("a swap of %s to %s was interrupted at %s: run `devk swap --rollback %s` to restore %s first",
		pod, j.NewImage, j.Started.Format(time.RFC3339), pod, j.OldImage)
}

// Read parses the manifest.
func (m Manifest) Read() (*corev1.Pod, []byte, error) {
	data, err := os.ReadFile(m.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("no manifest %s: is the cluster up (devk up), or pass --manifests-dir", m.Path)
	}
	if err != nil {
		return nil, nil, err
	}
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(data, &pod); err != nil {
		if err2 := yaml.Unmarshal(data, &pod); err2 != nil {
			return nil, nil, fmt.Errorf("%s is not a pod manifest: %w", m.Path, err2)
		}
	}
	if pod.Kind != "Pod" {
		return nil, nil, fmt.Errorf("%s is a %q, not a static Pod manifest", m.Path, pod.Kind)
	}
	return &pod, data, nil
}

// ReadBackup parses the manifest kept by the last swap.
func (m Manifest) ReadBackup() (*corev1.Pod, error) {
	pod, _, err := m.readBackup()
	return pod, err
}

func (m Manifest) readBackup() (*corev1.Pod, []byte, error) {
	data, err := os.ReadFile(m.BackupPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: %s has none (no swap was made with this manifests dir)", ErrNoBackup, m.Path)
	}
	if err != nil {
		return nil, nil, err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return nil, nil, fmt.Errorf("backup %s is not a pod manifest: %w", m.BackupPath(), err)
	}
	return &pod, data, nil
}

// Container picks the container to swap: the one named name, or the only one.
func Container(pod *corev1.Pod, name string) (*corev1.Container, error) {
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i], nil
		}
	}
	if len(pod.Spec.Containers) == 1 {
		return &pod.Spec.Containers[0], nil
	}
	var names []string
	for _, c := range pod.Spec.Containers {
		names = append(names, c.Name)
	}
	return nil, fmt.Errorf("pod %s has no container %q (it has %s)", pod.Name, name, strings.Join(names, ", "))
}

// WrittenAnnotation is stamped on every manifest devk writes. The kubelet
// names a static pod by the hash of its manifest: without the stamp,
// swapping back to an image that ran before would reuse a pod UID the
// kubelet has just terminated, and the kubelet keeps that UID's final
// status, so the mirror pod would not show the new pod for minutes.
const WrittenAnnotation = "devk.dev/written"

// WithImage returns the manifest bytes with the container's image set to
// image (unchanged when image is empty) and WrittenAnnotation set to now,
// and the image it replaced. Every other field is kept.
func WithImage(data []byte, pod *corev1.Pod, container, image string, now time.Time) ([]byte, string, error) {
	c, err := Container(pod, container)
	if err != nil {
		return nil, "", err
	}
	old := c.Image
	// A generic map keeps the fields corev1.Pod does not know.
	var obj map[string]any
	if err := yaml.Unmarshal(data, &obj); err != nil {
		return nil, "", err
	}
	md, _ := obj["metadata"].(map[string]any)
	if md == nil {
		md = map[string]any{}
		obj["metadata"] = md
	}
	ann, _ := md["annotations"].(map[string]any)
	if ann == nil {
		ann = map[string]any{}
		md["annotations"] = ann
	}
	ann[WrittenAnnotation] = now.UTC().Format(time.RFC3339Nano)
	if image != "" {
		spec, _ := obj["spec"].(map[string]any)
		ctrs, _ := spec["containers"].([]any)
		for _, ct := range ctrs {
			if m, ok := ct.(map[string]any); ok && (m["name"] == c.Name) {
				m["image"] = image
			}
		}
	}
	out, err := yaml.Marshal(obj)
	if err != nil {
		return nil, "", err
	}
	return out, old, nil
}

// SetImage points the manifest's container at image: it keeps the current
// manifest as the backup, records a journal, runs handover (when not nil;
// see Vacate), and writes the new manifest through a temp file in WorkDir,
// fsynced and renamed into place, so the kubelet never reads a partial
// file. It returns the image it replaced.
func (m Manifest) SetImage(container, image string, handover func()) (old string, err error) {
	pod, data, err := m.Read()
	if err != nil {
		return "", err
	}
	out, old, err := WithImage(data, pod, container, image, time.Now())
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(m.WorkDir, 0o700); err != nil {
		return "", err
	}
	if err := fileutil.WriteAtomic(m.BackupPath(), data, 0o600, m.WorkDir); err != nil {
		return "", err
	}
	j, _ := json.MarshalIndent(Journal{Manifest: m.Path, Backup: m.BackupPath(), OldImage: old, NewImage: image, Started: time.Now().UTC()}, "", "  ")
	if err := fileutil.WriteAtomic(m.JournalPath(), j, 0o600, m.WorkDir); err != nil {
		return "", err
	}
	if handover != nil {
		handover()
	}
	if err := fileutil.WriteAtomic(m.Path, out, 0o600, m.WorkDir); err != nil {
		return "", fmt.Errorf("%w (is %s on the same filesystem as %s?)", err, m.WorkDir, m.Path)
	}
	return old, nil
}

// Finish marks the swap done: the journal goes, the backup stays for
// `devk swap --rollback`.
func (m Manifest) Finish() error {
	err := os.Remove(m.JournalPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// InProgress reads the journal of an unfinished swap, if any.
func (m Manifest) InProgress() (*Journal, error) {
	data, err := os.ReadFile(m.JournalPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var j Journal
	if err := json.Unmarshal(data, &j); err != nil {
		return nil, fmt.Errorf("read %s: %w", m.JournalPath(), err)
	}
	return &j, nil
}

// Vacate moves the manifest out of the manifests dir (into WorkDir), so
// the kubelet stops the pod. A swap vacates before it writes the new
// manifest: the kubelet starts a static pod only once the previous one of
// the same name is gone, and one that finds it still terminating waits
// out a 10 s back-off.
func (m Manifest) Vacate() error {
	err := os.Rename(m.Path, filepath.Join(m.WorkDir, m.name()+".yaml.vacated"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Restore puts the backup back in place atomically, after handover (when
// not nil), and returns the image it names. The backup is kept, so
// restoring twice is harmless.
func (m Manifest) Restore(container string, handover func()) (string, error) {
	pod, data, err := m.readBackup()
	if err != nil {
		return "", err
	}
	c, err := Container(pod, container)
	if err != nil {
		return "", err
	}
	out, _, err := WithImage(data, pod, container, "", time.Now())
	if err != nil {
		return "", err
	}
	if handover != nil {
		handover()
	}
	if err := fileutil.WriteAtomic(m.Path, out, 0o600, m.WorkDir); err != nil {
		return "", err
	}
	return c.Image, m.Finish()
}
