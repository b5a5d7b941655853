package debbase

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/devk/devk/internal/execx"
)

// Deb is one package's content, as dpkg-deb gives it.
type Deb struct {
	// Name is the package's name (its control file goes to
	// /var/lib/dpkg/status.d/<Name>).
	Name string
	// Control is the package's control file.
	Control []byte
	// Data is the package's data archive, an uncompressed tar
	// (dpkg-deb --fsys-tarfile).
	Data io.Reader
}

// ReadDeb unpacks the .deb at path with dpkg-deb (which handles every
// compression a .deb may use).
func ReadDeb(ctx context.Context, name, debPath string) (Deb, error) {
	control, err := execx.Output(ctx, execx.Cmd{Name: "dpkg-deb", Args: []string{"--field", debPath}})
	if err != nil {
		return Deb{}, fmt.Errorf("read the control file of %s: %w", debPath, err)
	}
	data, err := execx.Output(ctx, execx.Cmd{Name: "dpkg-deb", Args: []string{"--fsys-tarfile", debPath}})
	if err != nil {
		return Deb{}, fmt.Errorf("unpack %s: %w (remove it; devk downloads it again)", debPath, err)
	}
	return Deb{Name: name, Control: control, Data: bytes.NewReader(data)}, nil
}

// mergedDirs are the top-level directories that are symlinks into /usr
// on a merged-/usr system (Debian 12's default): files a package ships
// under /lib go to /usr/lib, and /lib -> usr/lib is made, so
// /lib64/ld-linux-x86-64.so.2 and /lib/x86_64-linux-gnu/… both resolve.
var mergedDirs = []string{"bin", "sbin", "lib", "lib32", "lib64", "libo32", "libx32"}

// alwaysMerged are made even when no package ships anything there.
var alwaysMerged = []string{"bin", "sbin", "lib"}

// scratchDirs are the world-writable, sticky directories every Debian
// system has (base-files' postinst makes them, not its data), which
// containers write to: the StatefulSet specs `mv` a web root's index.html
// to /tmp/.
var scratchDirs = []string{"tmp", "var/tmp"}

// scratchMode is theirs: rwx for all, sticky.
const scratchMode = 0o1777

// droppedDirs hold documentation a base does not need.
var droppedDirs = []string{"usr/share/man", "usr/share/info", "usr/share/lintian"}

// StatusDir holds one control file per package, as Google's distroless
// images keep them, for image scanners.
const StatusDir = "var/lib/dpkg/status.d"

// entry is one file of the root filesystem being built.
type entry struct {
	typ  byte // tar.TypeDir, tar.TypeReg or tar.TypeSymlink
	mode int64
	link string
	data []byte
	from string // the package that shipped it
}

func (e *entry) same(o *entry) bool {
	return e.typ == o.typ && e.mode == o.mode && e.link == o.link && bytes.Equal(e.data, o.data)
}

// tree is a root filesystem by clean relative path.
type tree map[string]*entry

// WriteTar writes the root filesystem of the packages as one tar:
// merged-/usr, docs but copyright files dropped, device files left out,
// /tmp and /var/tmp made (scratchDirs),
// hard links made copies, each package's control file under StatusDir,
// then the symlinks (path -> target) a maintainer script would have made
// and the scripts (path -> content, mode 0755) the base adds.
// Entries are sorted by path, owned by root (uid and gid 0, no names) and
// all have the newest mtime found in the packages, which is returned.
func WriteTar(w io.Writer, debs []Deb, symlinks, scripts map[string]string) (time.Time, error) {
	t := tree{}
	var newest time.Time
	for _, d := range debs {
		if !debName.MatchString(d.Name) || strings.Contains(d.Name, ":") {
			return time.Time{}, fmt.Errorf("%q is not a Debian package name", d.Name)
		}
		n, err := t.addData(d)
		if err != nil {
			return time.Time{}, err
		}
		if n.After(newest) {
			newest = n
		}
		if err := t.add(StatusDir+"/"+d.Name, &entry{typ: tar.TypeReg, mode: 0o644, data: d.Control, from: d.Name}); err != nil {
			return time.Time{}, err
		}
	}
	for _, d := range mergedDirs {
		if slices.Contains(alwaysMerged, d) || t["usr/"+d] != nil {
			t.addDirs("usr/" + d)
			if err := t.add(d, &entry{typ: tar.TypeSymlink, mode: 0o777, link: "usr/" + d, from: "merged /usr"}); err != nil {
				return time.Time{}, err
			}
		}
	}
	for _, d := range scratchDirs {
		if t[d] == nil {
			t[d] = &entry{typ: tar.TypeDir, mode: scratchMode, from: "a scratch directory"}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(symlinks)) {
		name, ok := cleanName(p)
		if !ok {
			return time.Time{}, fmt.Errorf("symlink %q: not a path in the image", p)
		}
		name = mergeUsr(name)
		if err := t.add(name, &entry{typ: tar.TypeSymlink, mode: 0o777, link: symlinks[p], from: "symlink " + p}); err != nil {
			return time.Time{}, err
		}
		got, err := t.resolve(name)
		if err == nil && t[got].typ != tar.TypeReg {
			err = fmt.Errorf("/%s is no file", got)
		}
		if err != nil {
			return time.Time{}, fmt.Errorf("symlink /%s -> %s points at no file the packages ship: %w", name, symlinks[p], err)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(scripts)) {
		name, ok := cleanName(p)
		if !ok {
			return time.Time{}, fmt.Errorf("script %q: not a path in the image", p)
		}
		name = mergeUsr(name)
		first, _, _ := strings.Cut(scripts[p], "\n")
		interp, ok := strings.CutPrefix(first, "#!")
		interp, _, _ = strings.Cut(strings.TrimSpace(interp), " ")
		if !ok || interp == "" {
			return time.Time{}, fmt.Errorf("script /%s does not start with #! and its interpreter", name)
		}
		if got, err := t.resolve(mergeUsr(strings.TrimPrefix(interp, "/"))); err != nil || t[got].typ != tar.TypeReg {
			return time.Time{}, fmt.Errorf("script /%s: its interpreter %s is no file the packages ship", name, interp)
		}
		if err := t.add(name, &entry{typ: tar.TypeReg, mode: 0o755, data: []byte(scripts[p]), from: "script " + p}); err != nil {
			return time.Time{}, err
		}
	}
	if err := t.addParents(); err != nil {
		return time.Time{}, err
	}
	if newest.IsZero() {
		newest = time.Unix(0, 0)
	}
	newest = newest.UTC()

	tw := tar.NewWriter(w)
	for _, name := range slices.Sorted(maps.Keys(t)) {
		e := t[name]
		h := &tar.Header{Typeflag: e.typ, Name: name, Mode: e.mode, ModTime: newest, Format: tar.FormatPAX}
		switch e.typ {
		case tar.TypeDir:
			h.Name += "/"
		case tar.TypeSymlink:
			h.Linkname = e.link
		case tar.TypeReg:
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return time.Time{}, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return time.Time{}, err
		}
	}
	return newest, tw.Close()
}

// addData adds a package's data archive; it returns the newest mtime in it.
func (t tree) addData(d Deb) (time.Time, error) {
	var newest time.Time
	tr := tar.NewReader(d.Data)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return newest, nil
		}
		if err != nil {
			return newest, fmt.Errorf("data of %s: %w", d.Name, err)
		}
		if h.ModTime.After(newest) {
			newest = h.ModTime
		}
		name, ok := cleanName(h.Name)
		if !ok {
			continue // the root itself
		}
		name = mergeUsr(name)
		if dropped(name) {
			continue
		}
		e := &entry{typ: h.Typeflag, mode: h.Mode & 0o7777, from: d.Name}
		switch h.Typeflag {
		case tar.TypeDir:
		case tar.TypeReg, tar.TypeRegA:
			e.typ = tar.TypeReg
			if e.data, err = io.ReadAll(tr); err != nil {
				return newest, fmt.Errorf("data of %s: %s: %w", d.Name, h.Name, err)
			}
		case tar.TypeSymlink:
			e.link = h.Linkname
		case tar.TypeLink:
			// A copy: the tar is sorted, so a link could come before
			// its target.
			target, ok := cleanName(h.Linkname)
			src := t[mergeUsr(target)]
			if !ok || src == nil || src.typ != tar.TypeReg {
				return newest, fmt.Errorf("data of %s: hard link %s to %s, which is no file before it", d.Name, h.Name, h.Linkname)
			}
			e.typ, e.mode, e.data = tar.TypeReg, src.mode, src.data
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			continue // a container runtime makes /dev
		default:
			return newest, fmt.Errorf("data of %s: %s has tar type %q, which a base image cannot hold", d.Name, h.Name, h.Typeflag)
		}
		if err := t.add(name, e); err != nil {
			return newest, err
		}
	}
}

// add puts e at name; two packages may ship the same directory, or the
// same file with the same content and mode, but nothing else twice.
func (t tree) add(name string, e *entry) error {
	old := t[name]
	switch {
	case old == nil:
		t[name] = e
	case old.typ == tar.TypeDir && e.typ == tar.TypeDir:
	case old.same(e):
	default:
		return fmt.Errorf("/%s comes from both %s and %s, differently: drop one of them", name, old.from, e.from)
	}
	return nil
}

// addDirs makes name and its parents directories where nothing is.
func (t tree) addDirs(name string) {
	for p := name; p != "."; p = path.Dir(p) {
		if t[p] == nil {
			t[p] = &entry{typ: tar.TypeDir, mode: 0o755, from: "a parent directory"}
		}
	}
}

// addParents gives every entry its parent directories; a parent that is
// something else (a file, a symlink) is an error, since extracting would
// write through it.
func (t tree) addParents() error {
	for _, name := range slices.Sorted(maps.Keys(t)) {
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			switch e := t[p]; {
			case e == nil:
				t[p] = &entry{typ: tar.TypeDir, mode: 0o755, from: "a parent directory"}
			case e.typ != tar.TypeDir:
				return fmt.Errorf("/%s (from %s) is under /%s, which %s ships as no directory", name, t[name].from, p, e.from)
			}
		}
	}
	return nil
}

// maxLinks bounds symlink resolution, as the kernel's ELOOP does.
const maxLinks = 40

// resolve follows symlinks inside the tree from name to what it names.
func (t tree) resolve(name string) (string, error) {
	for hops := 0; ; hops++ {
		if hops > maxLinks {
			return "", fmt.Errorf("too many levels of symlinks at /%s", name)
		}
		parts := strings.Split(name, "/")
		cur, followed := "", false
		for i, part := range parts {
			next := path.Join(cur, part)
			e := t[next]
			if e == nil {
				return "", fmt.Errorf("/%s does not exist", next)
			}
			if e.typ == tar.TypeSymlink {
				base := path.Join(cur, e.link)
				if path.IsAbs(e.link) {
					base = e.link
				}
				// ".." at the root stays at the root.
				base = strings.TrimPrefix(path.Clean("/"+base), "/")
				name = path.Join(append([]string{base}, parts[i+1:]...)...)
				followed = true
				break
			}
			cur = next
		}
		if !followed {
			return cur, nil
		}
	}
}

// cleanName turns a tar entry's name (./usr/bin/x, usr/lib/) into a clean
// relative path (".." cannot climb above the root); false for the root.
func cleanName(n string) (string, bool) {
	c := path.Clean("/" + n)
	if c == "/" || strings.Contains(n, "\x00") {
		return "", false
	}
	return c[1:], true
}

// mergeUsr moves what a package ships under /lib, /bin, … to /usr.
func mergeUsr(name string) string {
	top, _, _ := strings.Cut(name, "/")
	if slices.Contains(mergedDirs, top) {
		return "usr/" + name
	}
	return name
}

// dropped says a path is documentation the base leaves out: manuals, info
// pages, lintian overrides, and everything under /usr/share/doc/<pkg>
// but the copyright file (licences stay with what they cover).
func dropped(name string) bool {
	for _, d := range droppedDirs {
		if name == d || strings.HasPrefix(name, d+"/") {
			return true
		}
	}
	if rest, ok := strings.CutPrefix(name, "usr/share/doc/"); ok {
		parts := strings.Split(rest, "/")
		return !(len(parts) == 1 || len(parts) == 2 && parts[1] == "copyright")
	}
	return false
}
