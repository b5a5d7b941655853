module k8s.io/kubernetes

go 1.24.0

require (
	k8s.io/client-go v0.0.0
	k8s.io/component-base v0.0.0
)

replace (
	k8s.io/client-go => ./staging/src/k8s.io/client-go
	k8s.io/component-base => ./staging/src/k8s.io/component-base
)
