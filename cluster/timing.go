package cluster

import (
	"time"
)

// How long up and down wait for what, and how often they look: every
// default once, here.
const (
	// DefaultWaitTimeout bounds wait-control-plane when --wait is not given.
	DefaultWaitTimeout = 4 * time.Minute
	// controlPlanePollInterval is how often wait-control-plane checks.
	controlPlanePollInterval = 250 * time.Millisecond

	// apiRequestTimeout bounds each API request of up: the API server
	// is fresh and the machine busy starting the rest.
	apiRequestTimeout = 10 * time.Second

	// addonWaitTimeout bounds addon/wait: the addons' images come from
	// the local registry, so their pods start within seconds.
	addonWaitTimeout  = 2 * time.Minute
	addonPollInterval = 250 * time.Millisecond
)
