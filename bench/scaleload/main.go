// Command scaleload is the scale bench's workload and measure (`make
// bench BENCH=scale`): on a devk cluster with kwok's fake nodes it
// creates a Deployment of -pods pods that only fake nodes take, waits
// until all are Running, and reports, as one JSON object on stdout:
// the time to all Running; the scheduler's throughput, from the pods'
// PodScheduled times (first to last) and from its own counter
// (scheduler_schedule_attempts_total{result="scheduled"}) over the same
// window; its p50 and p99 scheduling latency from its histograms
// (scheduler_pod_scheduling_sli_duration_seconds, pod creation to bound,
// and scheduler_scheduling_attempt_duration_seconds, one attempt),
// each the change over the run; the resident memory of the control
// plane's processes, kwok's and the node's of this machine, and the CPU
// time each spent over the run beside all cores' busy time. -delete removes the Deployment
// and waits until its pods are gone.
//
//	scaleload -kubeconfig $DEVK_HOME/clusters/devk/admin.conf \
//	  -scheduler https://10.250.0.2:10259 -pods 10000
//
// A contributor compares two schedulers by running it, `devk swap
// scheduler` (another build of the tree), then running it again.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
)

const (
	// fakeKey is kwok's label and taint key on devk's fake nodes.
	fakeKey = "kwok.x-k8s.io/node"
	// poll is how often the wait looks.
	poll = time.Second
	// timeout bounds the wait for all Running.
	timeout = 15 * time.Minute
)

// Result is what one run measured.
type Result struct {
	Pods           int     `json:"pods"`
	RunningSeconds float64 `json:"runningSeconds"`
	// PodsPerSecond: scheduled pods over first to last PodScheduled.
	PodsPerSecond float64 `json:"podsPerSecond"`
	// CounterPodsPerSecond: the scheduler's own counter over the run.
	CounterPodsPerSecond float64 `json:"counterPodsPerSecond"`
	// SLIP50/P99: creation to bound (seconds); AttemptP50/P99: one attempt.
	SLIP50     float64 `json:"sliP50"`
	SLIP99     float64 `json:"sliP99"`
	AttemptP50 float64 `json:"attemptP50"`
	AttemptP99 float64 `json:"attemptP99"`
	// RSS in MiB of the processes whose command is each name.
	RSS map[string]float64 `json:"rssMiB"`
	// CPUSeconds each process (by name) spent over the run, user and
	// system; "machine" is every core's busy time together, so each
	// process's share of what the machine did is its figure over that.
	CPUSeconds map[string]float64 `json:"cpuSeconds,omitempty"`
}

// measured are the processes whose memory and CPU are reported.
var measured = []string{"kube-apiserver", "etcd", "kwok", "kube-controller-manager", "kube-scheduler", "kubelet", "containerd"}

// machineCPU names the busy time of all cores in CPUSeconds.
const machineCPU = "machine"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the cluster's admin kubeconfig")
	scheduler := flag.String("scheduler", "", "the scheduler's secure endpoint, https://NODE_IP:10259")
	pods := flag.Int("pods", 10000, "how many pods")
	name := flag.String("name", "scale", "the Deployment's name, in namespace default")
	del := flag.Bool("delete", false, "delete the Deployment and wait until its pods are gone")
	rss := flag.Bool("rss", false, "report the memory alone")
	flag.Parse()
	if err := run(*kubeconfig, *scheduler, *name, *pods, *del, *rss); err != nil {
		fmt.Fprintln(os.Stderr, "scaleload:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, scheduler, name string, pods int, del, rssOnly bool) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if rssOnly {
		return json.NewEncoder(os.Stdout).Encode(Result{RSS: memory()})
	}
	if del {
		return remove(ctx, cs, name)
	}
	metrics := func() (string, error) { return scrape(cfg, scheduler) }
	before, err := metrics()
	if err != nil {
		return err
	}
	cpu0 := cpuSeconds()
	t0 := time.Now()
	if err := create(ctx, cs, name, int32(pods)); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, poll, timeout, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && int(d.Status.ReadyReplicas) == pods, nil
	})
	if err != nil {
		return fmt.Errorf("%d pods not all Running within %s: %w", pods, timeout, err)
	}
	res := Result{Pods: pods, RunningSeconds: time.Since(t0).Seconds(), RSS: memory(), CPUSeconds: cpuSeconds()}
	for k := range res.CPUSeconds {
		res.CPUSeconds[k] -= cpu0[k]
	}
	after, err := metrics()
	if err != nil {
		return err
	}
	first, last, err := scheduledWindow(ctx, cs, name)
	if err != nil {
		return err
	}
	if span := last.Sub(first).Seconds(); span > 0 {
		res.PodsPerSecond = float64(pods) / span
		scheduled := counter(after, `scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"}`) -
			counter(before, `scheduler_schedule_attempts_total{profile="default-scheduler",result="scheduled"}`)
		res.CounterPodsPerSecond = scheduled / span
	}
	sli := histogram(after, "scheduler_pod_scheduling_sli_duration_seconds").minus(histogram(before, "scheduler_pod_scheduling_sli_duration_seconds"))
	attempt := histogram(after, "scheduler_scheduling_attempt_duration_seconds").minus(histogram(before, "scheduler_scheduling_attempt_duration_seconds"))
	// Interpolated within a bucket (the SLI's double up to 655 s), a
	// quantile may exceed the run: no pod of it waited longer than it.
	res.SLIP50, res.SLIP99 = min(sli.quantile(0.5), res.RunningSeconds), min(sli.quantile(0.99), res.RunningSeconds)
	res.AttemptP50, res.AttemptP99 = attempt.quantile(0.5), attempt.quantile(0.99)
	if math.IsNaN(res.SLIP50) || math.IsNaN(res.AttemptP50) {
		return fmt.Errorf("the scheduler's histograms at %s had no samples over the run", scheduler)
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// create makes the Deployment: pods that tolerate and select the fake
// nodes; kwok runs nothing, so the image is never pulled.
func create(ctx context.Context, cs kubernetes.Interface, name string, n int32) error {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(n),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{fakeKey: "fake"},
					Tolerations:  []corev1.Toleration{{Key: fakeKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					Containers:   []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
				},
			},
		},
	}
	_, err := cs.AppsV1().Deployments("default").Create(ctx, d, metav1.CreateOptions{})
	return err
}

func remove(ctx context.Context, cs kubernetes.Interface, name string) error {
	if err := cs.AppsV1().Deployments("default").Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationForeground)}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, poll, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name, Limit: 1})
		return err == nil && len(l.Items) == 0, nil
	})
}

// scheduledWindow is the first and last PodScheduled time of the pods.
func scheduledWindow(ctx context.Context, cs kubernetes.Interface, name string) (first, last time.Time, err error) {
	l, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		return first, last, err
	}
	for _, p := range l.Items {
		for _, c := range p.Status.Conditions {
			if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionTrue {
				continue
			}
			if t := c.LastTransitionTime.Time; first.IsZero() || t.Before(first) {
				first = t
			}
			if t := c.LastTransitionTime.Time; t.After(last) {
				last = t
			}
		}
	}
	return first, last, nil
}

// scrape reads the scheduler's /metrics with the kubeconfig's client
// certificate (its serving certificate is not checked: an address on
// devk's bridge, this machine's).
func scrape(cfg *rest.Config, endpoint string) (string, error) {
	c := rest.CopyConfig(cfg)
	c.Host, c.TLSClientConfig.CAData, c.TLSClientConfig.CAFile, c.TLSClientConfig.Insecure = endpoint, nil, "", true
	tr, err := rest.TransportFor(c)
	if err != nil {
		return "", err
	}
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	resp, err := client.Get(strings.TrimSuffix(endpoint, "/") + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s/metrics: %s: %.200s", endpoint, resp.Status, body)
	}
	return string(body), err
}

// counter is a sample's value in a Prometheus text exposition.
func counter(text, sample string) float64 {
	for line := range strings.Lines(text) {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return 0
}

// hist is a histogram's cumulative counts by upper bound, summed over
// its label sets.
type hist map[float64]float64

func histogram(text, name string) hist {
	h := hist{}
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, name+"_bucket{") {
			continue
		}
		i := strings.Index(line, `,le="`) // not profile="…"
		if i < 0 {
			i = strings.Index(line, `{le="`)
		}
		j := strings.LastIndex(line, "} ")
		if i < 0 || j < 0 {
			continue
		}
		le, _, _ := strings.Cut(line[i+5:], `"`)
		bound, err := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			bound, err = math.Inf(1), nil
		}
		v, err2 := strconv.ParseFloat(strings.TrimSpace(line[j+2:]), 64)
		if err == nil && err2 == nil {
			h[bound] += v
		}
	}
	return h
}

func (h hist) minus(o hist) hist {
	out := hist{}
	for b, v := range h {
		out[b] = v - o[b]
	}
	return out
}

// quantile interpolates q within the bucket it falls in, as Prometheus'
// histogram_quantile does.
func (h hist) quantile(q float64) float64 {
	bounds := slices.Sorted(func(yield func(float64) bool) {
		for b := range h {
			if !yield(b) {
				return
			}
		}
	})
	if len(bounds) == 0 || h[bounds[len(bounds)-1]] == 0 {
		return math.NaN()
	}
	rank := q * h[bounds[len(bounds)-1]]
	lo, below := 0.0, 0.0
	for _, b := range bounds {
		if h[b] >= rank {
			if math.IsInf(b, 1) {
				return lo
			}
			return lo + (b-lo)*(rank-below)/(h[b]-below)
		}
		lo, below = b, h[b]
	}
	return lo
}

// memory is the resident memory of this machine's measured processes,
// by name, in MiB.
func memory() map[string]float64 {
	out := map[string]float64{}
	for _, p := range processes() {
		f, err := os.Open(filepath.Join(p.dir, "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
				out[p.name] += kb / 1024
			}
		}
		f.Close()
	}
	return out
}

// clockTicks is the unit of /proc's CPU times (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpuSeconds is the CPU time (user and system) of this machine's
// measured processes, by name, and of all its cores (machineCPU).
func cpuSeconds() map[string]float64 {
	out := map[string]float64{}
	for _, p := range processes() {
		data, err := os.ReadFile(filepath.Join(p.dir, "stat"))
		if err != nil {
			continue
		}
		// The command, in parentheses, may hold spaces: the fields
		// after its closing parenthesis begin at the state (3rd);
		// utime and stime are the 14th and 15th.
		_, rest, ok := strings.Cut(string(data), ") ")
		fields := strings.Fields(rest)
		if !ok || len(fields) < 13 {
			continue
		}
		for _, f := range fields[11:13] {
			t, _ := strconv.ParseFloat(f, 64)
			out[p.name] += t / clockTicks
		}
	}
	if data, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(data), "\n")
		// cpu user nice system idle iowait irq softirq steal guest
		// guest_nice: busy is all but idle and iowait, up to steal (a
		// guest's time is counted in user already).
		fields := strings.Fields(line)
		for i, f := range fields[1:min(len(fields), 9)] {
			if i == 3 || i == 4 {
				continue
			}
			t, _ := strconv.ParseFloat(f, 64)
			out[machineCPU] += t / clockTicks
		}
	}
	return out
}

// process is one running process of measured.
type process struct{ name, dir string }

// processes are the running processes whose command is one of measured,
// with their /proc directories; figures of several of a name add up.
func processes() []process {
	var out []process
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 {
			continue
		}
		argv0, _, _ := strings.Cut(string(data), "\x00")
		name := filepath.Base(argv0)
		if !slices.Contains(measured, name) {
			continue
		}
		out = append(out, process{name, filepath.Dir(p)})
	}
	return out
}
