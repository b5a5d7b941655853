package conformance

import (
	"fmt"
	"path"
	"strings"

	"sigs.k8s.io/yaml"
)

// Registries are the registries the e2e framework pulls from, by the key
// KUBE_TEST_REPO_LIST names them with (test/utils/image/manifest.go's
// RegistryList), with their default values, which give each its path
// under the cluster's registry.
var Registries = map[string]string{
	"gcAuthenticatedRegistry":  "gcr.io/authenticated-image-pulling",
	"promoterE2eRegistry":      "registry.k8s.io/e2e-test-images",
	"buildImageRegistry":       "registry.k8s.io/build-image",
	"invalidRegistry":          "invalid.registry.k8s.io/invalid",
	"gcEtcdRegistry":           "registry.k8s.io",
	"gcRegistry":               "registry.k8s.io",
	"sigStorageRegistry":       "registry.k8s.io/sig-storage",
	"privateRegistry":          "gcr.io/k8s-authenticated-test",
	"dockerLibraryRegistry":    "docker.io/library",
	"cloudProviderGcpRegistry": "registry.k8s.io/cloud-provider-gcp",
}

// RepoListFile is the name of the KUBE_TEST_REPO_LIST file devk writes
// in a run's directory.
const RepoListFile = "repo-list.yaml"

// MirrorOf is where the cluster's registry holds what the framework
// would pull from an upstream registry: the upstream's host becomes the
// first path element (registry.k8s.io/e2e-test-images ->
// <registry>/registry.k8s.io/e2e-test-images), so two upstreams never
// share a repository and no name of devk's own images is taken.
func MirrorOf(registry, upstream string) string {
	return path.Join(registry, upstream)
}

// RepoList is the KUBE_TEST_REPO_LIST file that points every registry
// of the framework at the cluster's registry: every image a spec names
// is then pulled from it (or fails to), and nothing from the internet.
func RepoList(registry string) ([]byte, error) {
	if registry == "" || strings.Contains(registry, "://") {
		return nil, fmt.Errorf("registry %q: want host:port", registry)
	}
	m := map[string]string{}
	for k, up := range Registries {
		m[k] = MirrorOf(registry, up)
	}
	return yaml.Marshal(m)
}
