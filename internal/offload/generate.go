package offload

// The BPF objects are generated from bpf/ and committed, so `go build` needs no clang.
// CI regenerates them and fails when the committed files differ.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type route -type endpoint -type client_key_v4 -type client_key_v6 -type peer_key_v4 -type peer_key_v6 -type flow_stats -type outcome_stats -type offload_config -type rate_bucket -type iface_info turn ../../bpf/turn_offload.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror
// The same source for TC ingress (bpf/hook.h); it shares the XDP object's maps.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -no-global-types turnTC ../../bpf/turn_offload.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror -DEBRTC_TC
// The XDP transmit tracepoints and the egress snooper: objects of their own, on the XDP object's maps.
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -no-global-types turnXmit ../../bpf/turn_xmit.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -no-global-types turnSnoop ../../bpf/turn_snoop.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror
//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel xdppass ../../bpf/xdp_pass.c -- -I../../bpf -I/usr/include/x86_64-linux-gnu -O2 -Wall -Werror
