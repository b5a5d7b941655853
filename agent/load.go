package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/devk/devk/registry"
)

// KindLoad puts images into the node's runtime when the node reaches no
// registry that has them (`--load`): the agent serves a registry on the
// node's loopback (LoadPort), its client pushes the images to it through
// a port-forward, and the agent pulls each through the runtime by digest,
// so the runtime keeps it as LoadRegistry/<name>@sha256:…, which a
// manifest names and the kubelet finds present. The registry and what was
// pushed go with the pod. The agent reads LoadInput lines on its stdin.
const KindLoad Kind = "load"

// LoadPort is the port of a load's registry on the node's loopback. It is
// part of the names the runtime keeps loaded images under, so it does not
// change: loading an image again names it as before.
const LoadPort = 5098

// LoadRegistry is where loaded images are named from, on every node.
var LoadRegistry = "127.0.0.1:" + strconv.Itoa(LoadPort)

// LoadServing begins the note a load agent writes once its registry
// serves: its client pushes then.
const LoadServing = "serving the load's registry"

// LoadTask is one node's load: its runtime.
type LoadTask struct {
	CRISocket string `json:"criSocket"`
}

// LoadInput is one line the client writes on a load agent's stdin: first
// the credential its registry takes writes with (never in the pod's
// spec, which others may read), then, once it pushed, what to pull.
type LoadInput struct {
	Credential string   `json:"credential,omitempty"`
	Pull       []string `json:"pull,omitempty"`
}

// loadWait bounds how long a load agent waits for its client's next line.
const loadWait = 10 * time.Minute

func (l *LoadTask) validate() error {
	if l == nil {
		return errors.New("agent task load: no runtime")
	}
	if err := cleanAbs(l.CRISocket); err != nil {
		return fmt.Errorf("agent task load: criSocket %w", err)
	}
	return nil
}

// runLoad serves the registry until its client names what to pull, then
// pulls it through the node's runtime.
func runLoad(ctx context.Context, l LoadTask, in io.Reader, lw *lineWriter) (PullResult, error) {
	dec := json.NewDecoder(in)
	first, err := readLoadInput(dec, "the registry's credential")
	if err != nil {
		return PullResult{}, err
	}
	if first.Credential == "" {
		return PullResult{}, errors.New("agent task load: the client sent no credential first")
	}
	// The pod's own directory, made 0777 by the kubelet: the registry
	// keeps its content only where no other user could write.
	if err := os.Chmod(WorkDir, 0o700); err != nil {
		return PullResult{}, err
	}
	cred := path.Join(WorkDir, "registry-credential")
	if err := os.WriteFile(cred, []byte(first.Credential+"\n"), 0o600); err != nil {
		return PullResult{}, err
	}
	reg, err := registry.New(path.Join(WorkDir, "registry"), &registry.Options{CredentialFile: cred})
	if err != nil {
		return PullResult{}, err
	}
	defer reg.Close()
	ln, err := net.Listen("tcp", LoadRegistry)
	if err != nil {
		return PullResult{}, fmt.Errorf("serve the load's registry on the node's %s: %w (another devk --load on this node? it ends within its deadline)", LoadRegistry, err)
	}
	srv := &http.Server{Handler: reg, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	lw.Infof("%s on %s", LoadServing, LoadRegistry)
	next, err := readLoadInput(dec, "what to pull")
	if err != nil {
		return PullResult{}, err
	}
	if len(next.Pull) == 0 {
		return PullResult{}, errors.New("agent task load: the client named nothing to pull")
	}
	for _, ref := range next.Pull {
		if !strings.HasPrefix(ref, LoadRegistry+"/") || !strings.Contains(ref, "@sha256:") {
			return PullResult{}, fmt.Errorf("agent task load: %s is not an image of the load's registry by digest", ref)
		}
	}
	return runPull(ctx, PullTask{CRISocket: l.CRISocket, Refs: next.Pull})
}

// readLoadInput reads the client's next line, at most loadWait.
func readLoadInput(dec *json.Decoder, what string) (LoadInput, error) {
	var li LoadInput
	done := make(chan error, 1)
	go func() { done <- dec.Decode(&li) }()
	select {
	case err := <-done:
		if err != nil {
			return li, fmt.Errorf("agent task load: reading %s from the client: %w", what, err)
		}
		return li, nil
	case <-time.After(loadWait):
		return li, fmt.Errorf("agent task load: no %s from the client in %s", what, loadWait)
	}
}
