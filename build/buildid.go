package build

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
)

// goBuildIDNote is the ELF note the Go linker writes its build ID into:
// section .note.go.buildid, owner "Go", type 4.
const (
	goBuildIDSection  = ".note.go.buildid"
	goBuildIDNoteType = 4
)

// GoBuildID is the build ID the Go linker wrote into the ELF binary at
// path, as `go tool buildid` prints it; "" for a file that is not ELF or
// has none. Its last part hashes the linked bytes, so two binaries with
// the same build ID and size are the same build: record uses it to skip
// hashing a binary go build only touched (go build sets an up-to-date
// output's mtime to now, so the mtime says nothing).
func GoBuildID(path string) (string, error) {
	f, err := elf.Open(path)
	if err != nil {
		var fe *elf.FormatError
		if errors.As(err, &fe) {
			return "", nil
		}
		return "", err
	}
	defer f.Close()
	s := f.Section(goBuildIDSection)
	if s == nil {
		return "", nil
	}
	data, err := s.Data()
	if err != nil {
		return "", err
	}
	return parseGoNote(data, f.ByteOrder), nil
}

// parseGoNote reads the one note of the section: namesz, descsz, type,
// the name padded to 4 bytes, then the description (the build ID).
func parseGoNote(data []byte, order binary.ByteOrder) string {
	if len(data) < 12 {
		return ""
	}
	namesz, descsz, typ := order.Uint32(data[0:]), order.Uint32(data[4:]), order.Uint32(data[8:])
	name := 12 + (uint64(namesz)+3)&^3
	if typ != goBuildIDNoteType || namesz != 4 || !bytes.Equal(data[12:min(len(data), 16)], []byte("Go\x00\x00")) ||
		uint64(len(data)) < name+uint64(descsz) {
		return ""
	}
	return string(data[name : name+uint64(descsz)])
}
