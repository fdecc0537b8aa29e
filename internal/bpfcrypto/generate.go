package bpfcrypto

// The BPF object is generated from bpf/ and committed, so `go build` needs no clang.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -no-global-types -type crypto_setup_args crypto ../../bpf/crypto_probe.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror
