package debbase

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"
)

// file is one entry of a synthetic package's data tar.
type file struct {
	name string
	typ  byte
	mode int64
	link string
	data string
	uid  int
	mt   time.Time
}

var (
	day1 = time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC)
	day2 = time.Date(2024, 6, 1, 12, 0, 0, 0, time.UTC)
)

// dataTar is a data.tar as dpkg-deb --fsys-tarfile gives it: ./-prefixed
// names, the builder's owners.
func dataTar(t *testing.T, files ...file) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Typeflag: f.typ, Mode: f.mode, Linkname: f.link, Size: int64(len(f.data)),
			Uid: f.uid, Gid: f.uid, Uname: "builder", Gname: "builder", ModTime: f.mt}
		if h.ModTime.IsZero() {
			h.ModTime = day1
		}
		if f.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.data)); err != nil && f.typ == tar.TypeReg {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// libc and tool are two small packages shaped like Debian 12's libc6 and
// iptables: files under /lib and /lib64, docs, a hard link, a device.
func libc(t *testing.T) Deb {
	return Deb{Name: "libc6", Control: []byte("Package: libc6\nVersion: 2.36\n"), Data: bytes.NewReader(dataTar(t,
		file{name: "./", typ: tar.TypeDir, mode: 0o755},
		file{name: "./lib/", typ: tar.TypeDir, mode: 0o755},
		file{name: "./lib/x86_64-linux-gnu/", typ: tar.TypeDir, mode: 0o755},
		file{name: "./lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", typ: tar.TypeReg, mode: 0o755, data: "loader", uid: 1000},
		file{name: "./lib/x86_64-linux-gnu/libc.so.6", typ: tar.TypeReg, mode: 0o755, data: "libc"},
		file{name: "./lib64/", typ: tar.TypeDir, mode: 0o755},
		file{name: "./lib64/ld-linux-x86-64.so.2", typ: tar.TypeSymlink, link: "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"},
		file{name: "./usr/share/doc/libc6/copyright", typ: tar.TypeReg, mode: 0o644, data: "LGPL"},
		file{name: "./usr/share/doc/libc6/changelog.Debian.gz", typ: tar.TypeReg, mode: 0o644, data: "log", mt: day2},
		file{name: "./usr/share/man/man1/ldd.1.gz", typ: tar.TypeReg, mode: 0o644, data: "man"},
		file{name: "./dev/null", typ: tar.TypeChar, mode: 0o666},
	))}
}

func tool(t *testing.T) Deb {
	return Deb{Name: "iptables", Control: []byte("Package: iptables\nVersion: 1.8.9-2\n"), Data: bytes.NewReader(dataTar(t,
		file{name: "./usr/sbin/xtables-nft-multi", typ: tar.TypeReg, mode: 0o4755, data: "multi"},
		file{name: "./usr/sbin/xtables-copy", typ: tar.TypeLink, link: "./usr/sbin/xtables-nft-multi"},
		file{name: "./usr/sbin/iptables-nft", typ: tar.TypeSymlink, link: "xtables-nft-multi"},
		file{name: "./usr/lib/x86_64-linux-gnu/xtables/libxt_mark.so", typ: tar.TypeReg, mode: 0o644, data: "mark"},
		file{name: "./lib/x86_64-linux-gnu/", typ: tar.TypeDir, mode: 0o755},
		file{name: "./usr/share/doc/iptables", typ: tar.TypeSymlink, link: "libc6"},
	))}
}

var toolLinks = map[string]string{"/usr/sbin/iptables": "xtables-nft-multi", "/sbin/ip6tables": "/usr/sbin/xtables-nft-multi"}

// written is what WriteTar wrote, by name.
func written(t *testing.T, debs []Deb, links map[string]string) (map[string]*tar.Header, map[string]string, []string, []byte) {
	t.Helper()
	var buf bytes.Buffer
	if _, err := WriteTar(&buf, debs, links, nil); err != nil {
		t.Fatal(err)
	}
	hs, data := map[string]*tar.Header{}, map[string]string{}
	var order []string
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs, data, order, buf.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
		n := strings.TrimSuffix(h.Name, "/")
		if hs[n] != nil {
			t.Fatalf("%s twice", n)
		}
		hs[n] = h
		order = append(order, n)
		b, _ := io.ReadAll(tr)
		data[n] = string(b)
	}
}

func TestWriteTar(t *testing.T) {
	hs, data, order, out := written(t, []Deb{libc(t), tool(t)}, toolLinks)

	t.Run("sorted, root-owned, one mtime", func(t *testing.T) {
		if !slices.IsSorted(order) {
			t.Fatalf("entries not sorted: %v", order)
		}
		for n, h := range hs {
			if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
				t.Errorf("%s owned by %d:%d (%s:%s)", n, h.Uid, h.Gid, h.Uname, h.Gname)
			}
			// The newest mtime the packages ship: the changelog's, though
			// the changelog itself is dropped.
			if !h.ModTime.Equal(day2) {
				t.Errorf("%s mtime %s, want %s", n, h.ModTime, day2)
			}
			if strings.HasPrefix(n, "/") || strings.HasPrefix(n, ".") {
				t.Errorf("entry name %q", n)
			}
		}
	})

	t.Run("scratch directories", func(t *testing.T) {
		for _, d := range []string{"tmp/", "var/tmp/"} {
			if h := hs[strings.TrimSuffix(d, "/")]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 || h.Name != d {
				t.Errorf("/%s: %+v, want a directory of mode 1777", d, h)
			}
		}
	})

	t.Run("merged /usr", func(t *testing.T) {
		for top, target := range map[string]string{"lib": "usr/lib", "lib64": "usr/lib64", "bin": "usr/bin", "sbin": "usr/sbin"} {
			if h := hs[top]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != target {
				t.Errorf("/%s: %+v, want a symlink to %s", top, h, target)
			}
		}
		if data["usr/lib/x86_64-linux-gnu/libc.so.6"] != "libc" || hs["usr/lib64/ld-linux-x86-64.so.2"].Linkname != "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" {
			t.Error("files under /lib and /lib64 did not move to /usr")
		}
		if hs["usr/lib"].Typeflag != tar.TypeDir || hs["usr/bin"].Typeflag != tar.TypeDir {
			t.Error("/usr/lib and /usr/bin must be directories")
		}
		// The loader path every dynamic binary names resolves to the file.
		tr := tree{}
		for n, h := range hs {
			tr[n] = &entry{typ: h.Typeflag, link: h.Linkname}
		}
		if got, err := tr.resolve("lib64/ld-linux-x86-64.so.2"); err != nil || got != "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" {
			t.Errorf("/lib64/ld-linux-x86-64.so.2 resolves to %q (%v)", got, err)
		}
	})

	t.Run("contents", func(t *testing.T) {
		for n, want := range map[string]string{
			"usr/sbin/xtables-copy":              "multi", // a hard link becomes a copy
			"usr/share/doc/libc6/copyright":      "LGPL",
			StatusDir + "/libc6":                 "Package: libc6\nVersion: 2.36\n",
			StatusDir + "/iptables":              "Package: iptables\nVersion: 1.8.9-2\n",
			"usr/lib/x86_64-linux-gnu/libc.so.6": "libc",
		} {
			if h := hs[n]; h == nil || h.Typeflag != tar.TypeReg || data[n] != want {
				t.Errorf("%s: %+v %q, want a file holding %q", n, h, data[n], want)
			}
		}
		for _, gone := range []string{"usr/share/doc/libc6/changelog.Debian.gz", "usr/share/man", "usr/share/man/man1/ldd.1.gz", "dev/null", "dev"} {
			if hs[gone] != nil {
				t.Errorf("%s is in the layer", gone)
			}
		}
		if hs["usr/sbin/xtables-nft-multi"].Mode != 0o4755 || hs["usr/sbin/xtables-copy"].Mode != 0o4755 {
			t.Error("modes are not the package's")
		}
		if hs["usr/share/doc/iptables"].Linkname != "libc6" {
			t.Error("a doc dir symlink is gone")
		}
		if h := hs["usr/sbin/iptables"]; h == nil || h.Linkname != "xtables-nft-multi" {
			t.Errorf("the alternatives symlink: %+v", h)
		}
		if h := hs["usr/sbin/ip6tables"]; h == nil || h.Linkname != "/usr/sbin/xtables-nft-multi" {
			t.Errorf("a symlink asked for under /sbin goes to /usr/sbin: %+v", h)
		}
		for n := range hs {
			if d := parentOf(n); d != "" && (hs[d] == nil || hs[d].Typeflag != tar.TypeDir) {
				t.Errorf("%s has no parent directory entry", n)
			}
		}
	})

	t.Run("deterministic", func(t *testing.T) {
		// Again, and with the packages in the other order.
		_, _, _, again := written(t, []Deb{libc(t), tool(t)}, toolLinks)
		_, _, _, swapped := written(t, []Deb{tool(t), libc(t)}, toolLinks)
		if !bytes.Equal(out, again) || !bytes.Equal(out, swapped) {
			t.Fatal("the same packages gave different tars")
		}
	})
}

func parentOf(n string) string {
	i := strings.LastIndex(n, "/")
	if i < 0 {
		return ""
	}
	return n[:i]
}

func TestWriteTarRefuses(t *testing.T) {
	other := func(files ...file) Deb {
		return Deb{Name: "other", Control: []byte("Package: other\n"), Data: bytes.NewReader(dataTar(t, files...))}
	}
	tests := []struct {
		name  string
		debs  []Deb
		links map[string]string
		want  string
	}{
		{"two packages ship one file differently", []Deb{libc(t), other(file{name: "./lib/x86_64-linux-gnu/libc.so.6", typ: tar.TypeReg, mode: 0o755, data: "mine"})}, nil,
			"/usr/lib/x86_64-linux-gnu/libc.so.6 comes from both libc6 and other"},
		{"a symlink to nothing", []Deb{tool(t)}, map[string]string{"/usr/sbin/iptables": "xtables-legacy-multi"},
			"symlink /usr/sbin/iptables -> xtables-legacy-multi points at no file"},
		{"a symlink to a directory", []Deb{tool(t)}, map[string]string{"/usr/sbin/iptables": "../lib"},
			"is no file"},
		{"a file under a symlink", []Deb{other(file{name: "./etc/alt", typ: tar.TypeSymlink, link: "/usr"}, file{name: "./etc/alt/x", typ: tar.TypeReg, data: "x"})}, nil,
			"/etc/alt/x (from other) is under /etc/alt"},
		{"a hard link to nothing", []Deb{other(file{name: "./a", typ: tar.TypeLink, link: "./b"})}, nil,
			"hard link"},
		{"a bad package name", []Deb{{Name: "../x", Data: bytes.NewReader(nil)}}, nil,
			"not a Debian package name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := WriteTar(io.Discard, tt.debs, tt.links, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q in it", err, tt.want)
			}
		})
	}
}

// Two packages may ship the same file with the same bytes (and any
// number the same directory).
func TestWriteTarSharedFiles(t *testing.T) {
	a := Deb{Name: "pkg-a", Data: bytes.NewReader(dataTar(t, file{name: "./etc/x", typ: tar.TypeReg, mode: 0o644, data: "same"}))}
	b := Deb{Name: "pkg-b", Data: bytes.NewReader(dataTar(t, file{name: "./etc/", typ: tar.TypeDir, mode: 0o755}, file{name: "./etc/x", typ: tar.TypeReg, mode: 0o644, data: "same"}))}
	hs, data, _, _ := written(t, []Deb{a, b}, nil)
	if data["etc/x"] != "same" || hs["etc"].Typeflag != tar.TypeDir {
		t.Fatalf("%v", hs)
	}
}

func TestDependencies(t *testing.T) {
	s := parseStanzas([]byte("Package: x\nVersion: 1\nPre-Depends: libc6 (>= 2.34)\nDepends: a (= 1), b:any | c (>= 2),\n d [amd64], e(>=1)\nDescription: two\n lines\n\nPackage: y\n"))
	if len(s) != 2 || s[1].get("Package") != "y" || s[0].get("Description") != "two\nlines" {
		t.Fatalf("stanzas %+v", s)
	}
	got := s[0].dependencies()
	want := [][]string{{"libc6"}, {"a"}, {"b", "c"}, {"d"}, {"e"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("dependencies %q, want %q", got, want)
	}
}
