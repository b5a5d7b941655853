package loadbalancer

import "time"

// What HAProxy is told to wait for, and how long devk waits for HAProxy:
// every value once, here.
const (
	// ConnectTimeout bounds HAProxy's TCP connect to an API server: the
	// servers are on the machine's own bridge, so a connect that takes
	// longer goes to a server that is gone.
	ConnectTimeout = 5 * time.Second
	// IdleTimeout is HAProxy's client and server timeout, how long a
	// connection may carry nothing in either direction. Kubernetes
	// clients keep watches open for minutes (client-go's reflectors ask
	// for 5 to 10 minutes), and `kubectl logs -f`, exec and port-forward
	// can sit silent for as long as their user does; HAProxy's usual
	// tens of seconds would cut them all.
	IdleTimeout = 15 * time.Minute
	// CheckInterval is how often HAProxy asks each API server's /readyz,
	// and CheckTimeout how long one check may take (TLS handshake and
	// answer): an API server that is starting or shutting down answers
	// 500 at once, a busy one may take a moment.
	CheckInterval = time.Second
	CheckTimeout  = 2 * time.Second
	// CheckFall failed checks in a row take a server out, CheckRise good
	// ones put it back: out within about two seconds of its /readyz
	// failing, back after one good answer.
	CheckFall = 2
	CheckRise = 1
	// statsTimeout is HAProxy's idle timeout on the stats socket.
	statsTimeout = 30 * time.Second

	// validateTimeout bounds `haproxy -c` (it parses the file, nothing more).
	validateTimeout = 10 * time.Second
	// StartTimeout bounds the wait for a started HAProxy to accept
	// connections on its frontend and answer on its stats socket (it
	// takes a few milliseconds).
	StartTimeout      = 10 * time.Second
	startPollInterval = 50 * time.Millisecond
	// dialTimeout bounds one look at the frontend.
	dialTimeout = 500 * time.Millisecond
	// ReloadTimeout bounds the wait for a new worker to take over after
	// SIGUSR2 to the master.
	ReloadTimeout      = 10 * time.Second
	reloadPollInterval = 50 * time.Millisecond
	// StopGrace is how long HAProxy gets after SIGTERM before SIGKILL; it
	// needs none (SIGTERM is its hard stop), so this is only a bound.
	StopGrace = 5 * time.Second

	// commandTimeout bounds one runtime API command on the stats socket.
	commandTimeout = 5 * time.Second
	// drainPollInterval is how often WaitIdleWithin asks for a drained
	// server's sessions.
	drainPollInterval = 100 * time.Millisecond
)
