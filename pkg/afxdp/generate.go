package afxdp

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type rx_port -type rx_port_key -type rx_iface -type rx_counter xskrx ../../bpf/xsk_rx.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror
