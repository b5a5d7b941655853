package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// commandDocs is where the command reference is generated: one Markdown
// page per command, from the same cobra tree `--help` prints.
const commandDocs = "../../docs/commands"

// updateDocsEnv set to 1 rewrites docs/commands (`make docs`).
const updateDocsEnv = "DEVK_UPDATE_DOCS"

// TestCommandDocs: docs/commands is what the command tree generates now,
// page for page, so the reference cannot drift from `--help`.
func TestCommandDocs(t *testing.T) {
	root := newRootCmd(io.Discard, io.Discard, nil)
	root.DisableAutoGenTag = true // no date: the pages are checked in
	hidePhasePaths(root)
	want := t.TempDir()
	if err := doc.GenMarkdownTree(root, want); err != nil {
		t.Fatal(err)
	}
	if os.Getenv(updateDocsEnv) == "1" {
		if err := os.RemoveAll(commandDocs); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(commandDocs, os.DirFS(want)); err != nil {
			t.Fatal(err)
		}
	}
	pages := func(dir string) []string {
		ents, _ := os.ReadDir(dir)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	gen, have := pages(want), pages(commandDocs)
	if !slices.Equal(gen, have) {
		t.Fatalf("docs/commands has pages %v; the command tree makes %v: run `make docs`", have, gen)
	}
	for _, name := range gen {
		g, _ := os.ReadFile(filepath.Join(want, name))
		h, _ := os.ReadFile(filepath.Join(commandDocs, name))
		if !bytes.Equal(g, h) {
			t.Errorf("docs/commands/%s differs from what the command tree generates: run `make docs`", name)
		}
	}
	t.Logf("%d command pages checked", len(gen))
}

// hidePhasePaths leaves `<job> phase PATH`'s one subcommand per phase out
// of the reference: the job's own page lists its phases, and a path's
// slashes are no file name.
func hidePhasePaths(c *cobra.Command) {
	for _, sub := range c.Commands() {
		if sub.Name() == "phase" {
			for _, p := range sub.Commands() {
				p.Hidden = true
			}
			continue
		}
		hidePhasePaths(sub)
	}
}
