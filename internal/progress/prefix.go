package progress

import "time"

// Under reports the steps of a job run inside another job's step as
// steps under it: step "kubelet-start" of a node join run by up's phase
// "nodes/devk-worker" is reported as "nodes/devk-worker/kubelet-start".
func Under(r Reporter, parent string) Reporter { return under{r, parent + "/"} }

type under struct {
	Reporter
	prefix string
}

func (u under) Start(step string) { u.Reporter.Start(u.prefix + step) }
func (u under) Done(step string, took time.Duration, detail string) {
	u.Reporter.Done(u.prefix+step, took, detail)
}
func (u under) Fail(step string, took time.Duration, err error) {
	u.Reporter.Fail(u.prefix+step, took, err)
}
func (u under) Skip(step, reason string)       { u.Reporter.Skip(u.prefix+step, reason) }
func (u under) Progress(step string, s Status) { u.Reporter.Progress(u.prefix+step, s) }
