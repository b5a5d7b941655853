package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/devk/devk/cluster/export"
)

// KindExport collects the node's part of `devk export logs` (export.Node:
// its manifests, container logs and containers) as a tarball in the
// pod's work directory, says its size and sha256, and waits there until
// its pod is deleted; the client reads the tarball meanwhile by exec
// (`devk agent cat`).
const KindExport Kind = "export"

// WorkDir is an agent pod's own directory (an emptyDir): an export's
// tarball.
const WorkDir = "/work"

// ExportTarball is where an export task writes its tarball.
const ExportTarball = WorkDir + "/export.tar.gz"

// exportDir is where it collects the files first (the tarball's top
// directory).
const exportDir = WorkDir + "/export"

func validateExport(f *export.NodeFiles) error {
	if f == nil {
		return errors.New("agent task export: no node")
	}
	for flag, p := range map[string]string{"podLogsDir": f.PodLogsDir, "criSocket": f.CRISocket} {
		if err := cleanAbs(p); err != nil {
			return fmt.Errorf("agent task export: %s %w", flag, err)
		}
	}
	if f.ManifestsDir != "" {
		if err := cleanAbs(f.ManifestsDir); err != nil {
			return fmt.Errorf("agent task export: manifestsDir %w", err)
		}
	}
	return nil
}

func exportMounts(f *export.NodeFiles) []Mount {
	ms := []Mount{{Path: f.PodLogsDir}, {Path: path.Dir(f.CRISocket)}}
	if f.ManifestsDir != "" {
		ms = append(ms, Mount{Path: f.ManifestsDir})
	}
	return ms
}

// Cat writes file, which must be in the agent's work directory, to w:
// how a client reads an export's tarball (by exec, binary-safe, not
// through the container's log).
func Cat(file string, w io.Writer) error {
	if path.Clean(file) != ExportTarball {
		return fmt.Errorf("devk agent cat reads %s alone", ExportTarball)
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// runExport is KindExport's collection.
func runExport(ctx context.Context, f export.NodeFiles) (*export.NodeResult, error) {
	return export.Node(ctx, exportDir, ExportTarball, f)
}
