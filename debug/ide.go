package debug

import (
	"context"
	"encoding/xml"
	"fmt"
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

// ide writes how to attach: the substitute-path rules of the debug
// binary (from its build info) as a dlv init file, a VS Code launch.json
// configuration and a GoLand run configuration, and fills the result.
func (j *job) ide(_ context.Context) (phase.Outcome, error) {
	st, err := build.LoadState(j.tree.Root)
	if err != nil {
		return phase.Done, err
	}
	cs := st.Component(j.comp.Name)
	if cs.Debug == nil || (cs.DebugPushed == nil && j.comp.StaticPod) {
		return phase.Done, fmt.Errorf("state.json has no debug build of %s (pushed)", j.comp.Name)
	}
	deps, err := srcpath.Deps(cs.Debug.Path)
	if err != nil {
		return phase.Done, err
	}
	rules, err := j.srcmap.Rules(deps)
	if err != nil {
		return phase.Done, err
	}
	dir := Dir(j.tree.Root)
	if err := os.MkdirAll(filepath.Join(dir, golandDir), 0o755); err != nil {
		return phase.Done, err
	}
	r := j.res
	r.Address, r.SubstitutePath, r.DebugPackages = j.listen(), rules, cs.Debug.DebugPackages
	if j.comp.StaticPod {
		r.Image = cs.DebugPushed.Ref
	} else {
		r.Binary = cs.Debug.Path
	}
	r.InitFile = filepath.Join(dir, j.comp.Binary+".dlv")
	r.LaunchJSON = filepath.Join(dir, "launch.json")
	r.GoLand = filepath.Join(dir, golandDir, j.comp.Binary+".run.xml")
	r.Connect = execx.Cmd{Name: "dlv", Args: []string{"connect", j.listen(), "--init", r.InitFile}}.String()
	if err := atomicfile.Write(r.InitFile, dlvInit(rules), 0o644, dir); err != nil {
		return phase.Done, err
	}
	launch, err := launchJSON(r.LaunchJSON, j.configName(), j.Address, j.Port, rules)
	if err != nil {
		return phase.Done, err
	}
	if err := atomicfile.Write(r.LaunchJSON, launch, 0o644, dir); err != nil {
		return phase.Done, err
	}
	goland, err := golandConfig(j.configName(), j.Address, j.Port)
	if err != nil {
		return phase.Done, err
	}
	if err := atomicfile.Write(r.GoLand, goland, 0o644, dir); err != nil {
		return phase.Done, err
	}
	return phase.Changed("%d substitute-path rules in %s, %s, %s", len(rules), r.InitFile, r.LaunchJSON, r.GoLand), nil
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
