package image

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/pgzip"

	"github.com/devk/devk/internal/atomicfile"
	"github.com/devk/devk/internal/validname"
)

// BinDir is where the binary lives inside the image.
const BinDir = "/usr/local/bin"

// Compression is how layers are gzipped, or that they are not. The digest
// of a layer depends on it, so it is part of the cache key; same
// settings, same bytes.
type Compression struct {
	// None leaves the layers as plain tars (OCI's uncompressed layer
	// media type): nothing to compress on push, nothing for the node's
	// runtime to decompress on pull, larger blobs; Level and BlockSize
	// are unused.
	None bool
	// Level is the gzip level (1 fastest … 9 smallest).
	Level int
	// BlockSize is the size of the blocks compressed in parallel; 0 means
	// one single-threaded gzip stream (the standard library's).
	BlockSize int
}

// DefaultCompression is what devk uses: parallel gzip (pgzip) at level 1 in
// 1 MiB blocks. On the kube-apiserver binary it is several times faster
// than single-threaded default gzip for a layer about 10% larger, which a
// loopback registry takes in a fraction of the time saved (see
// bench/results/image.md). The output does not depend on the number of
// cores, only on these settings.
var DefaultCompression = Compression{Level: 1, BlockSize: 1 << 20}

// StandardCompression is single-threaded default gzip, what ko and most
// image tools produce; the benchmark compares against it.
var StandardCompression = Compression{Level: gzip.DefaultCompression}

// NoCompression is plain tar layers, for a registry on this machine.
var NoCompression = Compression{None: true}

func (c Compression) key() string {
	if c.None {
		return "tar"
	}
	if c.BlockSize == 0 {
		return fmt.Sprintf("gz%d", c.Level)
	}
	return fmt.Sprintf("pgz%d-%dk", c.Level, c.BlockSize>>10)
}

func (c Compression) writer(w io.Writer) (io.WriteCloser, error) {
	if c.None {
		return nopWriteCloser{w}, nil
	}
	if c.BlockSize == 0 {
		return gzip.NewWriterLevel(w, c.Level)
	}
	zw, err := pgzip.NewWriterLevel(w, c.Level)
	if err != nil {
		return nil, err
	}
	// The block count only bounds memory and parallelism; the bytes
	// written depend on the block size alone.
	if err := zw.SetConcurrency(c.BlockSize, 8); err != nil {
		return nil, err
	}
	return zw, nil
}

// layerFormat versions the tar layout below; bump it when that changes so
// cached layers of the old layout are not reused.
const layerFormat = "v1"

// epoch is the mtime of every entry: the Unix epoch, so that the same
// binary always gives the same layer.
var epoch = time.Unix(0, 0).UTC()

// writeLayerTar writes the layer's tar stream: the directories down to
// the binary's and the binary at imagePath (checked by the caller), owned
// by root, fixed modes, zero mtimes.
func writeLayerTar(w io.Writer, bin io.Reader, path string, size int64, imagePath string) error {
	tw := tar.NewWriter(w)
	dir := ""
	for _, d := range strings.Split(strings.Trim(pathpkg.Dir(imagePath), "/"), "/") {
		if d == "" { // the binary is at the root
			continue
		}
		dir += d + "/"
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: dir, Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX,
		}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg, Name: dir + pathpkg.Base(imagePath), Mode: 0o755, Size: size, ModTime: epoch, Format: tar.FormatPAX,
	}); err != nil {
		return err
	}
	n, err := io.CopyBuffer(tw, bin, make([]byte, 1<<20))
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if n != size {
		return fmt.Errorf("%s changed size while being read (%d bytes, expected %d): is a build still running?", path, n, size)
	}
	return tw.Close()
}

// layerMeta is what the cache records beside a compressed layer.
type layerMeta struct {
	Digest       string `json:"digest"`
	DiffID       string `json:"diffID"`
	Size         int64  `json:"size"`
	BinarySHA256 string `json:"binarySHA256,omitempty"`
	BinarySize   int64  `json:"binarySize,omitempty"`
	Compression  string `json:"compression"`
	// MTime is the mtime of the layer's files when a LayerOf writer
	// reports one.
	MTime time.Time `json:"mtime,omitzero"`
}

// LayerCache keeps compressed layers by the sha256 of the binary they
// hold, so an unchanged binary is not compressed again and its layer
// keeps its digest (and so is not uploaded again).
type LayerCache struct {
	Dir         string
	Compression Compression
	// Keep is how many layers per binary name stay on disk (the newest).
	Keep int
}

// NewLayerCache returns the cache of a tree's output dir.
func NewLayerCache(outputDir string) *LayerCache {
	return &LayerCache{Dir: filepath.Join(outputDir, "layers"), Compression: DefaultCompression, Keep: 3}
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

func (c *LayerCache) paths(name, key string) (blob, meta string) {
	base := filepath.Join(c.Dir, fmt.Sprintf("%s-%s-%s-%s", name, key, layerFormat, c.Compression.key()))
	return base + ".tar.gz", base + ".json"
}

// Layer returns the layer holding the binary at path (whose sha256 is
// binSHA) as /usr/local/bin/<name>, from the cache when present; hit
// says whether it was.
func (c *LayerCache) Layer(path, name, binSHA string, mt types.MediaType) (l v1.Layer, hit bool, err error) {
	return c.LayerAt(path, BinDir+"/"+name, binSHA, mt)
}

// LayerAt is Layer with the binary at imagePath inside the image
// (/coredns, /agnhost).
func (c *LayerCache) LayerAt(path, imagePath, binSHA string, mt types.MediaType) (l v1.Layer, hit bool, err error) {
	// Both become a file name in the cache; binSHA may come from a
	// state.json anyone could have edited.
	if err := validname.ImagePath(imagePath); err != nil {
		return nil, false, fmt.Errorf("layer cache: %w", err)
	}
	if !sha256Hex.MatchString(binSHA) {
		return nil, false, fmt.Errorf("layer cache: binary sha256 %q is not 64 lowercase hex digits: rebuild the binary (devk build)", binSHA)
	}
	// The key names the tar's bytes: the binary, and where it sits when
	// that is not BinDir.
	key := binSHA
	if pathpkg.Dir(imagePath) != BinDir {
		sum := sha256.Sum256([]byte(binSHA + "\x00" + imagePath))
		key = hex.EncodeToString(sum[:])
	}
	cl, err := c.cached(pathpkg.Base(imagePath), key, mt, func(blobPath string) (*layerMeta, error) {
		return c.build(path, imagePath, binSHA, blobPath)
	})
	if err != nil {
		return nil, false, err
	}
	return cl.Layer, cl.Hit, nil
}

// CachedLayer is a layer from a LayerCache.
type CachedLayer struct {
	Layer v1.Layer
	// MTime is what the writer reported when it made the layer.
	MTime time.Time
	// Hit says the layer came from the cache (nothing was written).
	Hit bool
}

// LayerOf returns the layer whose uncompressed tar write writes, cached
// under name and key (64 lowercase hex digits that name the tar's
// content: the same key must always mean the same bytes). write returns
// the mtime of the tar's files, kept with the layer.
func (c *LayerCache) LayerOf(name, key string, mt types.MediaType, write func(io.Writer) (time.Time, error)) (CachedLayer, error) {
	if !sha256Hex.MatchString(key) {
		return CachedLayer{}, fmt.Errorf("layer cache: key %q is not 64 lowercase hex digits", key)
	}
	return c.cached(name, key, mt, func(blobPath string) (*layerMeta, error) {
		var mtime time.Time
		m, err := c.compress(blobPath, func(w io.Writer) (err error) {
			mtime, err = write(w)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("compress layer of %s: %w", name, err)
		}
		m.MTime = mtime
		return m, nil
	})
}

// cached returns the layer cached under name and key, or makes it with
// build (which writes the compressed blob at the path it is given).
func (c *LayerCache) cached(name, key string, mt types.MediaType, build func(blobPath string) (*layerMeta, error)) (CachedLayer, error) {
	// name becomes a file name in the cache.
	if err := validname.Component(name); err != nil {
		return CachedLayer{}, fmt.Errorf("layer cache: %w", err)
	}
	blobPath, metaPath := c.paths(name, key)
	if m, err := readMeta(metaPath); err == nil {
		if fi, err := os.Stat(blobPath); err == nil && fi.Size() == m.Size {
			now := time.Now()
			_ = os.Chtimes(metaPath, now, now) // keeps it among the newest for pruning
			l, err := m.layer(blobPath, c.Compression.mediaType(mt))
			return CachedLayer{Layer: l, MTime: m.MTime, Hit: true}, err
		}
	}
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return CachedLayer{}, fmt.Errorf("layer cache: %w", err)
	}
	m, err := build(blobPath)
	if err != nil {
		return CachedLayer{}, err
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return CachedLayer{}, err
	}
	// The metadata is written last: a cache entry exists only once its
	// blob is complete.
	if err := atomicfile.Write(metaPath, append(data, '\n'), 0o644, ""); err != nil {
		return CachedLayer{}, fmt.Errorf("layer cache: %w", err)
	}
	c.prune(name)
	l, err := m.layer(blobPath, c.Compression.mediaType(mt))
	return CachedLayer{Layer: l, MTime: m.MTime}, err
}

func readMeta(path string) (*layerMeta, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	m := &layerMeta{}
	if err := json.Unmarshal(data, m); err != nil {
		return nil, err
	}
	return m, nil
}

// build compresses the binary's layer, the binary at imagePath, into
// blobPath.
func (c *LayerCache) build(path, imagePath, binSHA, blobPath string) (*layerMeta, error) {
	bin, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open binary: %w", err)
	}
	defer bin.Close()
	fi, err := bin.Stat()
	if err != nil {
		return nil, err
	}
	// The binary is not hashed again: callers pass the sha256 the build
	// recorded for this size and mtime (checked before), and a binary
	// rewritten while being read fails the size check.
	m, err := c.compress(blobPath, func(w io.Writer) error { return writeLayerTar(w, bin, path, fi.Size(), imagePath) })
	if err != nil {
		return nil, fmt.Errorf("compress layer of %s: %w", imagePath, err)
	}
	m.BinarySHA256, m.BinarySize = binSHA, fi.Size()
	return m, nil
}

// compress writes the tar that write makes into blobPath, compressed,
// hashing it on the way (digest of the blob, diff ID of the tar).
func (c *LayerCache) compress(blobPath string, write func(io.Writer) error) (*layerMeta, error) {
	m := &layerMeta{Compression: c.Compression.key()}
	err := atomicfile.WriteFrom(blobPath, func(out io.Writer) error {
		digest, diffID := sha256.New(), sha256.New()
		compressed := &countingWriter{w: io.MultiWriter(out, digest)}
		zw, err := c.Compression.writer(compressed)
		if err != nil {
			return err
		}
		if err := write(io.MultiWriter(zw, diffID)); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		m.Digest = hashString(digest)
		m.DiffID = hashString(diffID)
		m.Size = compressed.n
		return nil
	}, 0o644, "")
	return m, err
}

// prune keeps the Keep most recently used layers of a binary.
func (c *LayerCache) prune(name string) {
	metas, err := filepath.Glob(filepath.Join(c.Dir, name+"-*.json"))
	if err != nil || len(metas) <= c.Keep {
		return
	}
	type entry struct {
		path string
		mod  time.Time
	}
	var es []entry
	for _, m := range metas {
		// A binary named like a prefix of another (kube-proxy vs
		// kube-proxy-x) must not prune the other's layers.
		rest := strings.TrimPrefix(filepath.Base(m), name+"-")
		if len(rest) < 64 || strings.ContainsRune(rest[:64], '-') {
			continue
		}
		if fi, err := os.Stat(m); err == nil {
			es = append(es, entry{m, fi.ModTime()})
		}
	}
	sort.Slice(es, func(i, j int) bool { return es[i].mod.After(es[j].mod) })
	for i := c.Keep; i < len(es); i++ {
		os.Remove(es[i].path)
		os.Remove(strings.TrimSuffix(es[i].path, ".json") + ".tar.gz")
	}
}

func hashString(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// fileLayer is a compressed layer on disk whose digests are known.
type fileLayer struct {
	path         string
	digest, diff v1.Hash
	size         int64
	mt           types.MediaType
}

func (m *layerMeta) layer(path string, mt types.MediaType) (v1.Layer, error) {
	d, err := v1.NewHash(m.Digest)
	if err != nil {
		return nil, fmt.Errorf("layer cache %s: %w", path, err)
	}
	diff, err := v1.NewHash(m.DiffID)
	if err != nil {
		return nil, fmt.Errorf("layer cache %s: %w", path, err)
	}
	return &fileLayer{path: path, digest: d, diff: diff, size: m.Size, mt: mt}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.diff, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return l.mt, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }

func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	if l.mt == types.OCIUncompressedLayer || l.mt == types.DockerUncompressedLayer {
		return f, nil
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("layer %s: %w (remove it; devk makes it again)", l.path, err)
	}
	return readCloser{zr, func() error { zr.Close(); return f.Close() }}, nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// mediaType is the layer media type mt (gzipped, as the base's manifest
// flavour names it) as this compression stores it.
func (c Compression) mediaType(mt types.MediaType) types.MediaType {
	if !c.None {
		return mt
	}
	if mt == types.DockerLayer {
		return types.DockerUncompressedLayer
	}
	return types.OCIUncompressedLayer
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }
