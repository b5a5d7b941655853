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

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/failpoint"
	"github.com/devk/devk/internal/staticpod"
	"github.com/devk/devk/internal/supervise"
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
	// Debug, when set, is how a new image runs under a debugger (`devk
	// debug`) or stops doing so; nil: a manifest `devk debug` wrote is
	// put back to its component's own command and probes all the same.
	Debug *Debugging
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

// BackupPath is where the manifest before the last finished swap is
// kept, for `devk swap --rollback`.
func (m Manifest) BackupPath() string { return filepath.Join(m.WorkDir, m.name()+".yaml.prev") }

// PendingPath holds the manifest a swap in progress replaces. It becomes
// BackupPath only when the swap finishes, so a swap that is interrupted
// or fails never costs a step of rollback history.
func (m Manifest) PendingPath() string { return filepath.Join(m.WorkDir, m.name()+".yaml.swapping") }

// VacatedPath is where a hand-over moves the manifest out to (Vacate).
func (m Manifest) VacatedPath() string { return filepath.Join(m.WorkDir, m.name()+".yaml.vacated") }

// JournalPath records a swap in progress, so an interrupted one can be
// finished or undone by the next run.
func (m Manifest) JournalPath() string { return filepath.Join(m.WorkDir, m.name()+".swap.json") }

// Journal is what a swap in progress records.
type Journal struct {
	Manifest string `json:"manifest"`
	// Backup is the manifest the swap replaces (PendingPath).
	Backup   string    `json:"backup"`
	OldImage string    `json:"oldImage"`
	NewImage string    `json:"newImage"`
	Started  time.Time `json:"started"`
	// Run is set by `devk run`, which takes the static pod out for a
	// process run in its place: NewImage is empty, and the pod is put
	// back (PutBack) however far the run got.
	Run *RunRecord `json:"run,omitempty"`
}

// RunRecord is what a `devk run` journal knows of the process it runs
// in a static pod's place.
type RunRecord struct {
	// Argv is the process's command line, as started (in the node).
	Argv []string `json:"argv"`
	// Process is the process once it started: the command that puts the
	// pod back after devk was killed stops it first, if it outlived devk.
	Process supervise.ProcessID `json:"process,omitzero"`
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
	path := m.BackupPath()
	// A swap in progress restores what it replaced; once it has finished
	// (a kill may have come between the two steps of Finish), that is .prev.
	if _, err := os.Stat(m.PendingPath()); err == nil {
		if j, err := m.InProgress(); err == nil && j != nil {
			path = m.PendingPath()
		}
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w: %s has none (no swap was made with this manifests dir)", ErrNoBackup, m.Path)
	}
	if err != nil {
		return nil, nil, err
	}
	var pod corev1.Pod
	if err := yaml.Unmarshal(data, &pod); err != nil {
		return nil, nil, fmt.Errorf("backup %s is not a pod manifest: %w", path, err)
	}
	if pod.Kind != "Pod" {
		return nil, nil, fmt.Errorf("backup %s is a %q, not a static Pod manifest", path, pod.Kind)
	}
	return &pod, data, nil
}

// ErrPutBack wraps the error of a swap that put the old manifest back
// before the new one was in place (the new one could not be written, or
// the hand-over was interrupted): the caller waits for the old pod and
// then Discards.
var ErrPutBack = errors.New("the old manifest is back in place")

// Begin is a swap's first step, before the node is touched: the manifest
// as it is becomes the pending backup (PendingPath), then a journal names
// the swap (JournalPath), so that a kill at any later step can be
// finished or undone by the next run. It checks that the manifest's
// container can be pointed at image, and returns the image it replaces.
func (m Manifest) Begin(container, image string) (old string, err error) {
	return m.begin(container, image, nil)
}

// BeginRun is a `devk run`'s first step, before the node is touched: as
// Begin, with a journal that names the run (argv, the command it will
// start) instead of a new image. It returns the manifest's image.
func (m Manifest) BeginRun(container string, argv []string) (old string, err error) {
	return m.begin(container, "", &RunRecord{Argv: argv})
}

// RecordRun notes in the journal of a run the process it started.
func (m Manifest) RecordRun(p supervise.ProcessID) error {
	j, err := m.InProgress()
	if err != nil {
		return err
	}
	if j == nil || j.Run == nil {
		return fmt.Errorf("%s records no run of %s", m.JournalPath(), m.name())
	}
	j.Run.Process = p
	return m.writeJournal(*j)
}

func (m Manifest) writeJournal(j Journal) error {
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(m.JournalPath(), data, 0o600, m.WorkDir)
}

func (m Manifest) begin(container, image string, run *RunRecord) (old string, err error) {
	pod, data, err := m.Read()
	if err != nil {
		return "", err
	}
	if _, old, err = staticpod.WithImage(data, pod, container, image, m.Debug.wrap(), time.Now()); err != nil {
		return "", err
	}
	if err := os.MkdirAll(m.WorkDir, 0o700); err != nil {
		return "", err
	}
	if err := atomicfile.Write(m.PendingPath(), data, 0o600, m.WorkDir); err != nil {
		return "", err
	}
	failpoint.Hit("swap/after-backup")
	if err := m.writeJournal(Journal{Manifest: m.Path, Backup: m.PendingPath(), OldImage: old, NewImage: image, Started: time.Now().UTC(), Run: run}); err != nil {
		return "", err
	}
	failpoint.Hit("swap/after-journal")
	return old, nil
}

// WriteImage writes the manifest of the swap Begin recorded: the pending
// backup with the container's image set to image, through a temp file in
// WorkDir, fsynced and renamed into place, so the kubelet never reads a
// partial file. (Between the two the hand-over may have moved the
// manifest out: the backup is what it was.)
func (m Manifest) WriteImage(container, image string) error {
	if image == "" {
		return fmt.Errorf("no image to write into %s", m.Path)
	}
	_, err := m.writeFromBackup(container, image)
	if err != nil {
		return fmt.Errorf("%w (is %s on the same filesystem as %s?)", err, m.WorkDir, m.Path)
	}
	return nil
}

// putBack restores the backup after a hand-over that went no further.
func (m Manifest) putBack(container string, cause error) error {
	if _, err := m.Restore(container, nil); err != nil {
		return fmt.Errorf("%w; and putting the old manifest back failed: %v (it is at %s)", cause, err, m.PendingPath())
	}
	return fmt.Errorf("%w: %w", ErrPutBack, cause)
}

// Finish marks the swap done: what it replaced becomes the backup for
// `devk swap --rollback`, then the journal goes.
func (m Manifest) Finish() error {
	if err := os.Rename(m.PendingPath(), m.BackupPath()); err == nil {
		if err := atomicfile.SyncDir(m.WorkDir); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return removeIfExists(m.JournalPath())
}

// Discard forgets a swap that was undone: the journal goes, then what it
// had kept aside; the backup of the last finished swap stays as it was.
func (m Manifest) Discard() error {
	if err := removeIfExists(m.JournalPath()); err != nil {
		return err
	}
	return removeIfExists(m.PendingPath())
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
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
		return nil, fmt.Errorf("read %s: %w (not a devk swap journal: move it away)", m.JournalPath(), err)
	}
	return &j, nil
}

// Vacate moves the manifest out of the manifests dir (into WorkDir), so
// the kubelet stops the pod. A swap vacates before it writes the new
// manifest: the kubelet starts a static pod only once the previous one of
// the same name is gone, and one that finds it still terminating waits
// out a 10 s back-off.
func (m Manifest) Vacate() error {
	err := os.Rename(m.Path, m.VacatedPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// Restore puts the backup (the pending one of a swap in progress, else
// the last finished swap's) back in place atomically, after handover
// (when not nil), and returns the image it names. The journal is left to
// the caller: it Discards once the old pod runs again. Restoring twice is
// harmless.
func (m Manifest) Restore(container string, handover func()) (string, error) {
	pod, _, err := m.readBackup()
	if err != nil {
		return "", err
	}
	if _, err := staticpod.Container(pod, container); err != nil {
		return "", err
	}
	if handover != nil {
		handover()
	}
	return m.writeFromBackup(container, "")
}

// writeFromBackup writes the backup into place with the container's image
// set to image (empty: as the backup names it) and a new
// staticpod.WrittenAnnotation; it returns the image written.
func (m Manifest) writeFromBackup(container, image string) (string, error) {
	pod, data, err := m.readBackup()
	if err != nil {
		return "", err
	}
	c, err := staticpod.Container(pod, container)
	if err != nil {
		return "", err
	}
	debug := m.Debug
	if image == "" {
		debug = nil // the backup as it was
	}
	out, _, err := staticpod.WithImage(data, pod, container, image, debug.wrap(), time.Now())
	if err != nil {
		return "", err
	}
	if err := atomicfile.Write(m.Path, out, 0o600, m.WorkDir); err != nil {
		return "", err
	}
	if image == "" {
		image = c.Image
	}
	return image, nil
}
