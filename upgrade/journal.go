package upgrade

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/skew"
)

// Journal is an upgrade's record in the cluster's directory
// (upgrade.json): where it goes, what ran before it, how far it got. A
// killed upgrade's next run reads it to resume; --rollback reads it to go
// back.
type Journal struct {
	// Tree is the tree upgraded to, To its version.
	Tree string `json:"tree"`
	To   string `json:"to"`
	// From is what every component ran before the upgrade began.
	From []skew.Running `json:"from"`
	// FromImages are the images the static pods (node/pod) and addons
	// (component) ran before the upgrade began.
	FromImages map[string]string `json:"fromImages"`
	// Started is when the upgrade began.
	Started time.Time `json:"started"`
	// Done says every step was verified.
	Done bool `json:"done,omitempty"`
	// Cordoned is the node whose kubelet step cordoned it and has not
	// uncordoned it yet: the next run uncordons it once its kubelet is
	// swapped.
	Cordoned string `json:"cordoned,omitempty"`
	// RolledBack says --rollback went back to From.
	RolledBack bool `json:"rolledBack,omitempty"`
}

// journalFile is the journal's path in the cluster directory dir.
func journalFile(dir string) string { return filepath.Join(dir, "upgrade.json") }

// readJournal reads the cluster's journal; none is (nil, nil).
func readJournal(dir string) (*Journal, error) {
	data, err := os.ReadFile(journalFile(dir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var jr Journal
	if err := json.Unmarshal(data, &jr); err != nil {
		return nil, fmt.Errorf("%s: %w (it is devk upgrade's journal: move it away to start afresh)", journalFile(dir), err)
	}
	return &jr, nil
}

// write saves the journal atomically (0600: it names the cluster's
// images).
func (jr *Journal) write(dir string) error {
	data, err := json.MarshalIndent(jr, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(journalFile(dir), append(data, '\n'), 0o600, dir)
}
