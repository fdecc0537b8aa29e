# ebrtc: eBPF-accelerated WebRTC media relays.
# `make demo` and `make test` each install what a fresh machine lacks first (root).
GO ?= go
BIN := bin/ebrtc

.PHONY: all build deps generate check-generate vet test demo clean

all: build

deps:
	./scripts/install-deps

build:
	$(GO) build -o $(BIN) ./cmd/ebrtc

# Regenerate the BPF objects from bpf/ (needs clang); they are committed.
generate:
	$(GO) generate ./...

# CI: the committed objects must be what the sources compile to.
check-generate: generate
	@git diff --exit-code --stat -- internal/offload || \
	  (echo "generated BPF objects differ from bpf/: run 'make generate' and commit" >&2; exit 1)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1)
	$(GO) vet ./...

# Privileged tests (BPF, namespaces) need root. -p 1: one testbed at a time on a small machine.
test: deps vet
	$(GO) test -count=1 -p 1 -timeout 20m ./...

demo: deps build
	./$(BIN) demo

clean:
	rm -rf bin
