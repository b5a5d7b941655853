package trace

import (
	"fmt"
	"slices"
	"strings"
)

// The keys of --filter KEY=VALUE.
const (
	FilterResource  = "resource"
	FilterNamespace = "namespace"
	FilterUserAgent = "user-agent"
)

// Filter keeps the requests, etcd writes and events that match: within
// a key any value matches (OR), and every key given must match (AND).
// An empty filter keeps everything.
type Filter struct {
	// Resources are resource names (pods, services, endpointslices), with
	// or without a group (endpointslices.discovery.k8s.io).
	Resources  []string
	Namespaces []string
	// UserAgents match a request's User-Agent by substring
	// (kubectl, endpointslice-controller, kube-proxy).
	UserAgents []string
}

// ParseFilter reads --filter's KEY=VALUE values.
func ParseFilter(specs []string) (Filter, error) {
	var f Filter
	for _, s := range specs {
		k, v, ok := strings.Cut(s, "=")
		if !ok || v == "" {
			return Filter{}, fmt.Errorf("--filter %q: want KEY=VALUE with KEY %s, %s or %s (e.g. --filter resource=services)", s, FilterResource, FilterNamespace, FilterUserAgent)
		}
		switch k {
		case FilterResource:
			f.Resources = append(f.Resources, v)
		case FilterNamespace:
			f.Namespaces = append(f.Namespaces, v)
		case FilterUserAgent:
			f.UserAgents = append(f.UserAgents, v)
		default:
			return Filter{}, fmt.Errorf("--filter %q: unknown key %q: use %s, %s or %s", s, k, FilterResource, FilterNamespace, FilterUserAgent)
		}
	}
	return f, nil
}

func (f Filter) resource(group, resource string) bool {
	if len(f.Resources) == 0 {
		return true
	}
	full := resource
	if group != "" {
		full += "." + group
	}
	return slices.Contains(f.Resources, resource) || slices.Contains(f.Resources, full)
}

func (f Filter) namespace(ns string) bool {
	return len(f.Namespaces) == 0 || slices.Contains(f.Namespaces, ns)
}

// agent matches a User-Agent; one not known (an etcd write no request
// was found for) matches only an empty list.
func (f Filter) agent(ua string) bool {
	if len(f.UserAgents) == 0 {
		return true
	}
	for _, a := range f.UserAgents {
		if ua != "" && strings.Contains(ua, a) {
			return true
		}
	}
	return false
}

// Request says whether f keeps r.
func (f Filter) Request(r Request) bool {
	return f.resource(r.group, r.resource) && f.namespace(r.Namespace) && f.agent(r.UserAgent)
}
