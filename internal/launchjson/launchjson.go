// Package launchjson is VS Code's launch.json as devk writes it: a
// configuration of devk's put in place of the one of its name, every
// other one (the user's own among them) kept as it is.
package launchjson

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/devk/devk/internal/atomicfile"
)

// Version is the launch.json format VS Code reads.
const Version = "0.2.0"

// With is the launch.json at path (a new one if there is none) with cfg,
// a configuration whose "name" is name, in place of the one of that name
// (last; the others keep their order and every field).
func With(path, name string, cfg any) ([]byte, error) {
	doc := map[string]any{"version": Version}
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		if err := json.Unmarshal(data, &doc); err != nil {
			return nil, fmt.Errorf("%s is not JSON devk can add to (move it away): %w", path, err)
		}
	}
	own, err := asMap(cfg)
	if err != nil {
		return nil, err
	}
	own["name"] = name
	cfgs, _ := doc["configurations"].([]any)
	var out []any
	for _, c := range cfgs {
		if m, ok := c.(map[string]any); ok && m["name"] == name {
			continue
		}
		out = append(out, c)
	}
	doc["configurations"] = append(out, own)
	return json.MarshalIndent(doc, "", "  ")
}

// Write writes With's launch.json to path atomically, making its
// directory.
func Write(path, name string, cfg any) error {
	data, err := With(path, name, cfg)
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, append(data, '\n'), 0o644, dir)
}

// asMap is cfg as the JSON object it marshals to.
func asMap(cfg any) (map[string]any, error) {
	if m, ok := cfg.(map[string]any); ok {
		return m, nil
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("a launch configuration must be a JSON object: %w", err)
	}
	return m, nil
}
