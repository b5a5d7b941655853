package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
)

// DefaultRoot is $DEVK_HOME/registry, DEVK_HOME defaulting to ~/.devk.
func DefaultRoot() (string, error) {
	home, err := layout.HomeDir("")
	if err != nil {
		return "", fmt.Errorf("keep the registry in a home directory (or pass --root): %w", err)
	}
	return layout.HomeFiles(home).RegistryRoot(), nil
}

// ServeOptions configure Serve.
type ServeOptions struct {
	// Addr is host:port to listen on; empty means 127.0.0.1:5000.
	Addr string
	// Root is where content is kept; empty means DefaultRoot(). It must
	// belong to the running user and be writable by no one else, nor may
	// anyone else be able to write to a directory above it.
	Root string
	// AllowDelete lets clients delete manifests and blobs.
	AllowDelete bool
	// CredentialFile is the secret writes need (Options.CredentialFile);
	// empty means image.DefaultCredentialFile().
	CredentialFile string
	// MaxBlobSize and MaxStorage are Options'.
	MaxBlobSize, MaxStorage int64
	// Log receives one line per request when set.
	Log io.Writer
	// Ready is called with the address actually listened on (useful with
	// port 0) once requests are accepted.
	Ready func(addr string)
}

// Serve runs the registry until ctx ends, then shuts down cleanly:
// requests in flight finish (for up to 10 s) and every stored manifest
// and blob is already on disk.
func Serve(ctx context.Context, o ServeOptions) error {
	if o.Root == "" {
		var err error
		if o.Root, err = DefaultRoot(); err != nil {
			return err
		}
	}
	if o.Addr == "" {
		o.Addr = image.DefaultRegistryAddr
	}
	if o.CredentialFile == "" {
		var err error
		if o.CredentialFile, err = image.DefaultCredentialFile(); err != nil {
			return err
		}
	}
	logger := log.New(io.Discard, "", 0)
	if o.Log != nil {
		logger = log.New(o.Log, "registry ", log.LstdFlags)
	}
	// Listen first: an address that cannot be served leaves the storage
	// untouched.
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", o.Addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%s is already in use (another registry? try `devk registry ls --registry %s`): pick another address with --addr: %w", o.Addr, o.Addr, err)
		}
		return fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	defer ln.Close()
	// A credential file that cannot be used leaves the storage untouched
	// too (a missing one is made once the root checked out).
	if _, err := image.LoadCredential(o.CredentialFile); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	root, err := openRoot(o.Root)
	if err != nil {
		return err
	}
	defer root.Close()
	// One server per storage: starting clears the uploads in progress,
	// which would be another server's.
	unlock, err := lockRoot(root)
	if err != nil {
		return err
	}
	defer unlock()
	h, err := newRegistry(root, &Options{Log: logger, AllowDelete: o.AllowDelete, CredentialFile: o.CredentialFile, MaxBlobSize: o.MaxBlobSize, MaxStorage: o.MaxStorage})
	if err != nil {
		return err
	}
	return serveUntilDone(ctx, h, ln, logger, o.Ready, "registry on "+o.Addr)
}

// serveUntilDone serves h on ln until ctx ends, then shuts the server
// down, giving requests in flight up to shutdownGrace; ready, when set,
// hears the address once it listens. what names the server in errors.
func serveUntilDone(ctx context.Context, h http.Handler, ln net.Listener, logger *log.Logger, ready func(addr string), what string) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, ErrorLog: logger}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-done:
		return fmt.Errorf("%s stopped: %w", what, err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		srv.Close()
		return fmt.Errorf("%s: requests still running after %s were cut off: %w", what, shutdownGrace, err)
	}
	return nil
}

// lockRoot takes an exclusive lock on the storage dir for as long as the
// server runs.
func lockRoot(root *os.Root) (unlock func(), err error) {
	path := filepath.Join(root.Name(), lockFile)
	f, err := root.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("registry storage: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("another `devk registry serve` is using %s: stop it, or pass another --root", root.Name())
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// How long the registry server waits for a client's request headers, and
// for requests still running when it is told to stop.
const (
	readHeaderTimeout = 30 * time.Second
	shutdownGrace     = 10 * time.Second
)
