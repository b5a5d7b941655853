# devk's make targets. `make test` is what CI and the README call.
GO        ?= go
BIN       ?= bin
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
E2E_TIMEOUT ?= 80m

.PHONY: build test fuzz e2e bench lint clean demo docs

# Static (CGO_ENABLED=0): devk's node agent image holds this binary and
# no libc.
build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/devk ./cmd/devk

# Unit and integration tests (real go builds of a fixture tree, in-process
# registry, embedded etcd), then a short fuzz run of each decoder.
test:
	$(GO) test -count=1 ./...
	$(MAKE) fuzz

# Every Fuzz* target of the module, FUZZTIME each (FUZZTIME=5m for a
# longer session, FUZZ=FuzzDecode for some): fails on a failing input or on
# a target that runs too few inputs. hack/fuzz says why not `go test -fuzz`.
FUZZTIME ?= 5s
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) hack/fuzz

# End-to-end: the real Kubernetes tree, real builds, real registries and
# runtimes. Needs root for the cluster parts; reuses the Go build cache.
e2e: build
	DEVK_BIN=$(abspath $(BIN)/devk) $(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) -v ./e2e/

# Benchmarks against the real alternatives; writes bench/RESULTS.md.
bench: build
	DEVK_BIN=$(abspath $(BIN)/devk) bench/run

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'run gofmt -w on the files above'; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags e2e ./e2e/

# The command reference in docs/commands, generated from the cobra tree
# (`make test` fails when it is out of date).
docs:
	DEVK_UPDATE_DOCS=1 $(GO) test -count=1 -run '^TestCommandDocs$$' ./cmd/devk/

clean:
	rm -rf $(BIN)

# The main job on a fresh machine: a Kubernetes tree, a cluster, a change
# to the apiserver built, pushed, swapped in and verified (hack/demo).
DEMO_DIR ?= $(HOME)/devk-demo/kubernetes-v1.34.4
demo: build
	DEVK_BIN=$(abspath $(BIN)/devk) DEMO_DIR=$(DEMO_DIR) hack/demo
