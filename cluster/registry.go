package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/devk/devk/image"
	"github.com/devk/devk/internal/layout"
	"github.com/devk/devk/phase"
	"github.com/devk/devk/registry"
)

// registryDaemon is devk's own registry on the host's loopback, at the
// config's address: one for every cluster of the home.
func (c *Cluster) registryDaemon() registry.Daemon {
	return registry.Daemon{Home: c.Home, Addr: c.Config.Registry}
}

// registryPaths is where the embedded registry keeps its pid file, log
// and store, for every cluster of the home.
func (c *Cluster) registryPaths() layout.Home { return c.registryDaemon().Paths() }

// forwarders relay the loopback registries the nodes pull from to the
// cluster's bridge.
func (c *Cluster) forwarders() registry.Forwarders {
	return registry.Forwarders{Procs: c.Files.Daemons().Procs(), Network: c.Config.Network, Registries: c.loopbackRegistries()}
}

// loopbackRegistries are the registries on the host's loopback the node
// pulls from (host:port each): they need a forwarder on the bridge.
func (c *Cluster) loopbackRegistries() []string {
	return registry.LoopbackHosts(c.registryAddr(), c.ImagesFrom)
}

// registryAddr is the registry this run of up uses: --registry when given
// (the registry phase records it in the config, after the runtime phase
// has written containerd's mirrors), else the config's.
func (c *Cluster) registryAddr() string {
	if c.Registry != "" {
		return c.Registry
	}
	return c.Config.Registry
}

// runRegistry makes sure the registry runs, then relays it to the
// cluster's bridge, where the node's containerd pulls from.
func (c *Cluster) runRegistry(ctx context.Context) (phase.Outcome, error) {
	out, err := c.hostRegistry(ctx)
	if err != nil {
		return out, err
	}
	fw := c.forwarders()
	started, err := fw.Start(ctx)
	if err != nil {
		return phase.Done, err
	}
	pullFrom := fw.Mirrors()
	if len(started) > 0 {
		pullFrom, out.Changed = started, true
	}
	out.Detail += "; nodes pull through " + strings.Join(pullFrom, ", ")
	return out, nil
}

// hostRegistry starts devk's registry on the host's loopback unless it
// runs, or checks the one given with --registry.
func (c *Cluster) hostRegistry(ctx context.Context) (phase.Outcome, error) {
	if c.Registry != "" {
		c.Config.Registry, c.Config.OwnRegistry = c.Registry, false
		if image.IsLoopback(c.Registry) && !registry.Answers(ctx, c.Registry) {
			return phase.Done, fmt.Errorf("no registry answers at %s: start one (`devk registry serve --addr %s`) or drop --registry to let devk run its own", c.Registry, c.Registry)
		}
		return phase.Unchanged("using %s", c.Config.Registry), c.SaveConfig()
	}
	if !c.Config.OwnRegistry && c.Config.Registry != layout.DefaultRegistry {
		// Chosen with --registry on an earlier run.
		if image.IsLoopback(c.Config.Registry) && !registry.Answers(ctx, c.Config.Registry) {
			return phase.Done, fmt.Errorf("the registry %s this cluster uses does not answer: start it, or pass --registry", c.Config.Registry)
		}
		return phase.Unchanged("using %s", c.Config.Registry), nil
	}
	c.Config.OwnRegistry = true
	pid, started, err := c.registryDaemon().EnsureRunning(ctx)
	if pid != 0 {
		// Recorded once it runs, answering or not: down stops it.
		if err := c.SaveConfig(); err != nil {
			return phase.Done, err
		}
	}
	if err != nil {
		return phase.Done, err
	}
	if !started {
		return phase.Unchanged("running on %s (pid %d)", c.Config.Registry, pid), nil
	}
	return phase.Changed("started on %s (pid %d)", c.Config.Registry, pid), nil
}

// downRegistry stops the cluster's forwarders, and the registry when no
// other cluster of the home uses it.
func (c *Cluster) downRegistry(ctx context.Context) (phase.Outcome, error) {
	fwd, err := c.forwarders().Stop(ctx)
	if err != nil {
		return phase.Done, err
	}
	d := c.registryDaemon()
	if _, ok := d.Paths().Procs().Running(registry.ProcessName); !ok {
		return phase.Outcome{Detail: fmt.Sprintf("%d forwarders stopped; devk's registry is not running", fwd), Changed: fwd > 0}, nil
	}
	// The registry serves every cluster under DEVK_HOME: the last one
	// down stops it.
	for _, o := range layout.Configs(c.Home, c.Config.Name) {
		if o.OwnRegistry {
			return phase.Outcome{Detail: fmt.Sprintf("%d forwarders stopped; the registry is kept: cluster %s uses it", fwd, o.Name), Changed: fwd > 0}, nil
		}
	}
	if err := d.Stop(ctx); err != nil {
		return phase.Done, err
	}
	return phase.Changed("stopped"), nil
}
