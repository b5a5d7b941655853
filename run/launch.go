package run

import (
	"path/filepath"
	"strings"

	"github.com/devk/devk/internal/launchjson"
)

// LaunchFile is the name of the VS Code launch configuration devk run
// writes into its directory of the tree's output (LaunchPath).
const LaunchFile = "launch.json"

// launchDir is that directory, under the tree's _output/devk.
const launchDir = "run"

// bindAddressFlag is the flag a control-plane component binds its
// serving port with: the node's address in devk's manifests.
const bindAddressFlag = "bind-address"

// LaunchPath is the launch configuration's file in the tree whose
// output dir is outputDir (source.Tree.OutputDir).
func LaunchPath(outputDir string) string { return filepath.Join(outputDir, launchDir, LaunchFile) }

// launchConfig is one configuration of a launch.json: VS Code's Go
// extension builds the package at Program and runs it under its
// debugger with Args, Env and Cwd.
type launchConfig struct {
	Name    string            `json:"name"`
	Type    string            `json:"type"`
	Request string            `json:"request"`
	Mode    string            `json:"mode"`
	Program string            `json:"program"`
	Args    []string          `json:"args"`
	Env     map[string]string `json:"env"`
	Cwd     string            `json:"cwd"`
}

// launchName names the configuration of a component's run.
func launchName(component string) string { return "devk run " + component }

// launch is the launch configuration that runs s from the package dir
// program on this machine rather than in the node: the same arguments
// and environment, but the serving port bound to the host's address on
// devk's bridge (hostIP) instead of the node's, which the host does not
// have. The node's API server and etcd are at their node addresses,
// which the host reaches through the bridge.
func launch(component, program, hostIP string, s Spec) launchConfig {
	args := append([]string(nil), s.Argv[1:]...)
	if hostIP != "" {
		for i, a := range args {
			if strings.HasPrefix(a, "--"+bindAddressFlag+"=") {
				args[i] = "--" + bindAddressFlag + "=" + hostIP
			}
		}
	}
	env := map[string]string{}
	for _, e := range s.Env {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	return launchConfig{Name: launchName(component), Type: "go", Request: "launch", Mode: "auto", Program: program, Args: args, Env: env, Cwd: s.Dir}
}

// writeLaunch writes cfg into the launch.json at path, in place of
// the configuration of the same name (launchjson).
func writeLaunch(path string, cfg launchConfig) error {
	return launchjson.Write(path, cfg.Name, cfg)
}
