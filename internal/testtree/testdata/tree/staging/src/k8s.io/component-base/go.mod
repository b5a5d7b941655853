module k8s.io/component-base

go 1.24.0
