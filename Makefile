# ebrtc: eBPF-accelerated WebRTC media relays.
# `make demo` and `make test` each install what a fresh machine lacks first (root).
GO ?= go
BIN := bin/ebrtc
SHELL := /bin/bash

.PHONY: all build deps generate check-generate vet test test-pion fuzz soak demo clean

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
	@git diff --exit-code --stat -- '*_bpfel.go' '*_bpfel.o' || \
	  (echo "generated BPF objects differ from bpf/: run 'make generate' and commit" >&2; exit 1)

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1)
	$(GO) vet ./...

# Privileged tests (BPF, namespaces) need root. internal/sfu, whose browser
# meetings judge frame rates and freezes on 2 CPUs, runs alone, after every
# other package, two at a time (each test in namespaces of its own): on this
# 2-CPU machine that keeps make test under 20 minutes (docs/testing.md).
# Every test binary is built first, two at a time (one at a time, each build
# would wait for the tests before it); a build error shows in the runs after.
# Short fuzz and churn budgets; make fuzz and make soak run the long ones.
# The output is go test's without -v, then the ten slowest tests.
ALONE := github.com/ebrtc/ebrtc/internal/sfu$$
test: deps vet test-pion
	-$(GO) test -count=1 -p 2 -run '^$$' ./... > /dev/null 2>&1
	set -o pipefail; { \
	  $(GO) test -json -count=1 -p 2 -timeout 25m $$($(GO) list ./... | grep -Ev '$(ALONE)'); a=$$?; \
	  $(GO) test -json -count=1 -p 1 -timeout 25m $$($(GO) list ./... | grep -E '$(ALONE)'); b=$$?; \
	  exit $$((a | b)); } | $(GO) run ./scripts/testreport

# The packages our patched copy of pion/turn changes (third_party/pion-turn/PATCHES.md).
# Skipped: TestClientWithSTUN needs the Internet; TestChannelBindReset (timing) and
# TestCreateTCPConnection (a random fixed port as the relay address) are flaky upstream.
test-pion:
	cd third_party/pion-turn && $(GO) test -count=1 ./internal/server/ ./internal/allocation/ ./internal/proto/ . \
	  -skip 'TestClientWithSTUN|TestChannelBindReset|TestCreateTCPConnection$$'

# Long budgets: every Go fuzz target for FUZZTIME, then the BPF harness on
# BPF_FUZZ_FRAMES frames in random worlds (docs/security.md has the figures).
FUZZTIME ?= 2m
BPF_FUZZ_FRAMES ?= 1000000
fuzz: deps
	FUZZTIME=$(FUZZTIME) BPF_FUZZ_FRAMES=$(BPF_FUZZ_FRAMES) ./scripts/fuzz

# 10,000 allocations over minutes, twice, with the heap checked after each round.
soak: deps
	$(GO) test -count=1 -timeout 40m -run '^TestChurn$$' -v ./internal/turnserver \
	  -churn.allocations 10000 -churn.duration 3m -churn.memory

demo: deps build
	./$(BIN) demo

clean:
	rm -rf bin
