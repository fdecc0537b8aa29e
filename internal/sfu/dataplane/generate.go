package dataplane

// The BPF object is generated from bpf/ and committed, so `go build` needs no clang.

//go:generate go run github.com/cilium/ebpf/cmd/bpf2go -cc clang -target bpfel -type sfu_config -type sfu_media -type sender_key_v4 -type sender_key_v6 -type sender -type replica -type replica_path -type fanout -type sfu_stats -type layer_templates -type replica_layers -type sim_state -type sim_numbers -type vp8_pictures -type sim_encodings -type rewrite_state -type video_event -type history_key -type history_entry -type leg_twcc -type audio_level sfu ../../../bpf/sfu.c -- -I../../../bpf -I/usr/include/x86_64-linux-gnu -O2 -g -mcpu=v3 -Wall -Werror
