package trace

import (
	"context"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/devk/devk/internal/kube"
)

// Event is an Event created or updated in the window.
type Event struct {
	Time      time.Time `json:"time"`
	Namespace string    `json:"namespace"`
	// Object is the object it is about, KIND/NAME.
	Object  string `json:"object"`
	Type    string `json:"type"`
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// Source is the component that reported it.
	Source string `json:"source,omitempty"`
	Count  int32  `json:"count,omitempty"`

	group, resource string
}

// listEvents lists the Events last seen at or after since (to the
// second: an Event's times are in seconds), oldest first. No kubeconfig
// lists none.
func listEvents(ctx context.Context, kubeconfig string, since time.Time) ([]Event, error) {
	if kubeconfig == "" {
		return nil, nil
	}
	cs, err := kube.Client(kubeconfig, func(c *rest.Config) { c.UserAgent = Agent })
	if err != nil {
		return nil, err
	}
	list, err := cs.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	from := since.Truncate(time.Second)
	var out []Event
	for _, e := range list.Items {
		t := eventTime(e)
		if t.Before(from) {
			continue
		}
		src := e.ReportingController
		if src == "" {
			src = e.Source.Component
		}
		io := e.InvolvedObject
		out = append(out, Event{Time: t, Namespace: e.Namespace, Object: io.Kind + "/" + io.Name, Type: e.Type,
			Reason: e.Reason, Message: e.Message, Source: src, Count: e.Count,
			group: groupOf(io.APIVersion), resource: strings.ToLower(io.Kind) + "s"})
	}
	slices.SortStableFunc(out, func(a, b Event) int { return a.Time.Compare(b.Time) })
	return out, nil
}

// eventTime is when an Event last happened: its series', its last
// timestamp, its event time, else its creation.
func eventTime(e corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func groupOf(apiVersion string) string {
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		return g
	}
	return ""
}
