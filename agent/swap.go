package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/devk/devk/build"
	"github.com/devk/devk/digest"
	"github.com/devk/devk/internal/cri"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/internal/nodelock"
	"github.com/devk/devk/internal/progress"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/swap"
)

// KindSwap swaps static pods on the node as a local `devk swap` on it
// does (swap.Run: the node's lock, its journal beside the manifests, the
// hand-over, the checks, the rollback), with the tree's state the client
// sent. The client checked the registry; the agent reaches the API server
// with the run's ServiceAccount. Nothing about the client can stop it: a
// client killed midway leaves it to finish or roll back on its own.
const KindSwap Kind = "swap"

// KindPull pulls images through the node's runtime by digest: before a
// swap changes any node's manifest, every node it goes to shows it can
// pull what it will run.
const KindPull Kind = "pull"

// SwapTask is one node's part of a swap through the cluster.
type SwapTask struct {
	// ManifestsDir, CRISocket and NodeName are the node's kubelet's.
	ManifestsDir string `json:"manifestsDir"`
	CRISocket    string `json:"criSocket"`
	NodeName     string `json:"nodeName"`
	// PKIDir, when under the manifests dir's parent (kubeadm's
	// /etc/kubernetes/pki), is mounted read-only over it: the swap
	// writes only manifests and its journal.
	PKIDir string `json:"pkiDir,omitempty"`
	// Components, Rollback, Timeout and StopGrace are swap.Options'.
	Components []string      `json:"components"`
	Rollback   bool          `json:"rollback,omitempty"`
	Timeout    time.Duration `json:"timeout,omitempty"`
	StopGrace  time.Duration `json:"stopGrace,omitempty"`
	// State is the tree's state file as the client read it: the
	// components' pushed images and built binaries (none on a rollback).
	State *build.StateFile `json:"state,omitempty"`
	// Skip are phases to leave out (--skip-phases).
	Skip []string `json:"skip,omitempty"`
	// Command is the client's command line, for messages saying what to
	// run next.
	Command string `json:"command,omitempty"`
}

// PullTask names the images one node pulls, by digest.
type PullTask struct {
	CRISocket string   `json:"criSocket"`
	Refs      []string `json:"refs"`
}

// PullResult is what a node pulled: its runtime's image ID of each ref.
type PullResult struct {
	ImageIDs map[string]string `json:"imageIDs"`
}

func (s *SwapTask) validate() error {
	if s == nil {
		return errors.New("agent task swap: no node")
	}
	for flag, p := range map[string]string{"manifestsDir": s.ManifestsDir, "criSocket": s.CRISocket} {
		if err := cleanAbs(p); err != nil {
			return fmt.Errorf("agent task swap: %s %w", flag, err)
		}
	}
	if path.Dir(s.ManifestsDir) == "/" {
		return fmt.Errorf("agent task swap: the manifests dir %s has no parent below / for devk's journal", s.ManifestsDir)
	}
	if s.PKIDir != "" {
		if err := cleanAbs(s.PKIDir); err != nil {
			return fmt.Errorf("agent task swap: pkiDir %w", err)
		}
	}
	if len(s.Components) == 0 {
		return errors.New("agent task swap: no component named")
	}
	for _, c := range s.Components {
		if comp, err := build.Lookup(c); err != nil || !comp.StaticPod {
			return fmt.Errorf("agent task swap: %q is not a static pod", c)
		}
	}
	if !s.Rollback && s.State == nil {
		return errors.New("agent task swap: no state of the tree to swap to")
	}
	return nil
}

func (p *PullTask) validate() error {
	if p == nil || len(p.Refs) == 0 {
		return errors.New("agent task pull: no image")
	}
	if err := cleanAbs(p.CRISocket); err != nil {
		return fmt.Errorf("agent task pull: criSocket %w", err)
	}
	for _, r := range p.Refs {
		if digest.Of(r) == "" {
			return fmt.Errorf("agent task pull: %q is not named by digest", r)
		}
	}
	return nil
}

// mounts are a swap's host paths: the manifests dir's parent read-write
// (the swap renames between the manifests dir and its journal dir
// beside it, which must be one mount), the PKI under it read-only, the
// runtime socket's dir, and devk's lock dir (made if missing), shared
// with a devk run on the node itself.
func (s *SwapTask) mounts() []Mount {
	parent := path.Dir(s.ManifestsDir)
	ms := []Mount{{Path: parent, Write: true}, {Path: path.Dir(s.CRISocket)}, {Path: nodelock.RootDir, Write: true, Create: true}}
	if s.PKIDir != "" && strings.HasPrefix(s.PKIDir, parent+"/") {
		ms = append(ms, Mount{Path: s.PKIDir})
	}
	return ms
}

// runSwap runs swap task s on this node, its progress sent as Events
// through lw, and returns its report (also when it failed: what was
// rolled back, the checks, the log).
func runSwap(ctx context.Context, s SwapTask, lw *lineWriter) (*swap.Report, error) {
	rep := progress.New(eventWriter{lw}, progress.Options{Mode: progress.JSON})
	o := swap.Options{
		Components: s.Components,
		Rollback:   s.Rollback,
		State:      s.State,
		Node:       layout.Node{ManifestsDir: s.ManifestsDir, CRISocket: s.CRISocket, InCluster: true},
		NodeName:   s.NodeName,
		Command:    s.Command,
		StopGrace:  s.StopGrace,
		Timeout:    s.Timeout,
		Reporter:   rep,
		// The client checked the registry (the node may not reach it by
		// the name the client does; the pull task showed it can pull).
		RegistryChecked: true,
	}
	return swap.Run(ctx, o, phase.Options{Reporter: rep, Skip: s.Skip, Job: "swap"})
}

// runPull pulls p's images through the node's runtime.
func runPull(ctx context.Context, p PullTask) (PullResult, error) {
	rt, err := cri.Dial(p.CRISocket)
	if err != nil {
		return PullResult{}, err
	}
	defer rt.Close()
	r := PullResult{ImageIDs: map[string]string{}}
	for _, ref := range p.Refs {
		id, err := rt.PullImage(ctx, ref)
		if err != nil {
			return r, err
		}
		r.ImageIDs[ref] = id
	}
	return r, nil
}

// eventWriter turns the lines of a JSON progress reporter into Lines.
type eventWriter struct{ lw *lineWriter }

func (e eventWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimSpace(string(p)), "\n") {
		var ev progress.Event
		if json.Unmarshal([]byte(line), &ev) != nil {
			continue
		}
		if err := e.lw.emit(Line{Event: &ev}); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
