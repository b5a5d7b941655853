package debug

import (
	"context"
	"encoding/xml"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/devk/devk/build"
	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/execx"
	"github.com/devk/devk/internal/launchjson"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/srcpath"
)

// Dir is where `devk debug` writes its files in a tree.
func Dir(treeRoot string) string { return filepath.Join(treeRoot, "_output", "devk", "debug") }

// Attach is how to attach to a component's debugger: where it listens,
// the dlv command line, the substitute-path rules of its binary and the
// files holding them for dlv and the IDEs.
type Attach struct {
	// Address is where the debugger listens (host:port, reachable from
	// the host on devk's bridge); Connect the dlv command line.
	Address string `json:"address,omitempty"`
	Connect string `json:"connect,omitempty"`
	// SubstitutePath maps the binary's module paths to the tree, the
	// module cache and GOROOT (Delve's order: from the binary's path).
	SubstitutePath []srcpath.Rule `json:"substitutePath,omitempty"`
	// InitFile holds the rules as dlv commands (`dlv connect --init`);
	// LaunchJSON and GoLand are IDE configurations attaching to Address.
	InitFile   string `json:"initFile,omitempty"`
	LaunchJSON string `json:"launchJSON,omitempty"`
	GoLand     string `json:"goland,omitempty"`
}

// WriteAttach writes how to attach to binary (a debug build of the tree
// srcmap maps) under the debugger at host:port: the substitute-path
// rules from its build info as a dlv init file, a VS Code launch.json
// configuration and a GoLand run configuration, named name, under the
// tree's Dir.
func WriteAttach(treeRoot string, srcmap *srcpath.Map, binary, name, host string, port int) (*Attach, error) {
	deps, err := srcpath.Deps(binary)
	if err != nil {
		return nil, err
	}
	rules, err := srcmap.Rules(deps)
	if err != nil {
		return nil, err
	}
	dir := Dir(treeRoot)
	if err := os.MkdirAll(filepath.Join(dir, golandDir), 0o755); err != nil {
		return nil, err
	}
	file := strings.ReplaceAll(name, " ", "-")
	a := &Attach{
		Address:        net.JoinHostPort(host, strconv.Itoa(port)),
		SubstitutePath: rules,
		InitFile:       filepath.Join(dir, filepath.Base(binary)+".dlv"),
		LaunchJSON:     filepath.Join(dir, "launch.json"),
		GoLand:         filepath.Join(dir, golandDir, file+".run.xml"),
	}
	a.Connect = execx.Cmd{Name: "dlv", Args: []string{"connect", a.Address, "--init", a.InitFile}}.String()
	if err := atomicfile.Write(a.InitFile, dlvInit(rules), 0o644, dir); err != nil {
		return nil, err
	}
	launch, err := launchJSON(a.LaunchJSON, name, host, port, rules)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(a.LaunchJSON, launch, 0o644, dir); err != nil {
		return nil, err
	}
	goland, err := golandConfig(name, host, port)
	if err != nil {
		return nil, err
	}
	if err := atomicfile.Write(a.GoLand, goland, 0o644, dir); err != nil {
		return nil, err
	}
	return a, nil
}

// ide writes how to attach (WriteAttach) and fills the result.
func (j *job) ide(_ context.Context) (phase.Outcome, error) {
	st, err := build.LoadState(j.tree.Root)
	if err != nil {
		return phase.Done, err
	}
	cs := st.Component(j.comp.Name)
	if cs.Debug == nil || (cs.DebugPushed == nil && j.comp.StaticPod) {
		return phase.Done, fmt.Errorf("state.json has no debug build of %s (pushed)", j.comp.Name)
	}
	a, err := WriteAttach(j.tree.Root, j.srcmap, cs.Debug.Path, j.configName(), j.Address, j.Port)
	if err != nil {
		return phase.Done, err
	}
	r := j.res
	r.Attach, r.DebugPackages = *a, cs.Debug.DebugPackages
	if j.comp.StaticPod {
		r.Image = cs.DebugPushed.Ref
	} else {
		r.Binary = cs.Debug.Path
	}
	return phase.Changed("%d substitute-path rules in %s, %s, %s", len(a.SubstitutePath), a.InitFile, a.LaunchJSON, a.GoLand), nil
}

// golandDir holds the GoLand run configurations (a project's .run/
// takes them as they are).
const golandDir = "goland"

// configName names the IDE configurations of the component.
func (j *job) configName() string { return "devk debug " + j.comp.Name }

// dlvInit is the rules as dlv commands: `dlv connect ADDR --init FILE`.
func dlvInit(rules []srcpath.Rule) []byte {
	var b strings.Builder
	b.WriteString("# written by devk debug: the binary's module paths -> this machine's files\n")
	for _, r := range rules {
		fmt.Fprintf(&b, "config substitute-path %s %s\n", quoteArg(r.From), quoteArg(r.To))
	}
	return []byte(b.String())
}

// quoteArg quotes a dlv command argument with a space in it.
func quoteArg(s string) string {
	if strings.ContainsAny(s, " \t\"") {
		return strconv.Quote(s)
	}
	return s
}

// launchJSON is the VS Code launch.json at path (a new one if none) with
// the configuration name attaching to the debugger at host:port, in
// place of one of that name. VS Code's substitutePath maps the other
// way round from Delve's: "from" is the local directory.
func launchJSON(path, name, host string, port int, rules []srcpath.Rule) ([]byte, error) {
	var subst []map[string]string
	for _, r := range rules {
		subst = append(subst, map[string]string{"from": r.To, "to": r.From})
	}
	return launchjson.With(path, name, map[string]any{
		"type": "go", "request": "attach", "mode": "remote",
		"host": host, "port": port, "substitutePath": subst,
	})
}

// golandRun is a GoLand "Go Remote" run configuration.
type golandRun struct {
	XMLName xml.Name `xml:"component"`
	Name    string   `xml:"name,attr"`
	Config  struct {
		Default     bool   `xml:"default,attr"`
		Name        string `xml:"name,attr"`
		Type        string `xml:"type,attr"`
		FactoryName string `xml:"factoryName,attr"`
		Host        string `xml:"host,attr"`
		Port        int    `xml:"port,attr"`
		Disconnect  struct {
			Name  string `xml:"name,attr"`
			Value string `xml:"value,attr"`
		} `xml:"option"`
		Method struct {
			V int `xml:"v,attr"`
		} `xml:"method"`
	} `xml:"configuration"`
}

// golandConfig attaches GoLand to the debugger at host:port, leaving the
// component running when it disconnects. (GoLand maps the binary's paths
// to the project itself.)
func golandConfig(name, host string, port int) ([]byte, error) {
	var r golandRun
	r.Name = "ProjectRunConfigurationManager"
	c := &r.Config
	c.Name, c.Type, c.FactoryName, c.Host, c.Port = name, "GoRemoteDebugConfigurationType", "Go Remote", host, port
	c.Disconnect.Name, c.Disconnect.Value = "disconnectOption", "LEAVE"
	c.Method.V = 2
	out, err := xml.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}
