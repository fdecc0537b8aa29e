package bench

// The benchmark's in-kernel traffic ends, generated from bpf/ and committed like the offload's.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel traffic ../../bpf/bench_traffic.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror
