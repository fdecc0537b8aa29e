/* The SFU data plane's maps (bpf/sfu.c): what user space installs (its
 * configuration, senders, fanouts, receivers' targets, templates), what
 * the program keeps per receiver and sender, and what it counts. Their
 * layouts are sfu.h's (and layers.h's, simulcast.h's). Included by sfu.c
 * only: one object. */
#ifndef EBRTC_SFU_MAPS_H
#define EBRTC_SFU_MAPS_H

#include "common.h"
#include "sfu.h"
#include "sfu_outcome.h"
#include "layers.h"
#include "simulcast.h"
#include "audio_level.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct sfu_config);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SFU_MAX_SENDERS);
	__type(key, struct sender_key_v4);
	__type(value, struct sender);
} senders_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SFU_MAX_SENDERS);
	__type(key, struct sender_key_v6);
	__type(value, struct sender);
} senders_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, struct fanout);
} fanouts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, struct sfu_stats);
} sender_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4 * SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, struct sfu_stats);
} replica_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 4 * SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, struct replica_path);
} replica_paths SEC(".maps");

/* bpf_fib_lookup's parameters, off the stack: the program's two frames
 * (main, and the bpf_loop callback) share 512 bytes. */
struct fib_scratch {
	__u8 bytes[sizeof(struct bpf_fib_lookup)]; /* opaque to bpf2go, which cannot mirror the kernel's unions */
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fib_scratch);
} fib_scratch SEC(".maps");

/* Per replica slot: 1 while its receiver waits for the sender's next key
 * frame (set by user space for a new receiver, cleared here by the first
 * packet of a key frame). Video only: audio replicas never wait. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4 * SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, __u32);
} replica_gates SEC(".maps");

/* Rate adaptation (layers.h): each sender's templates (user space installs
 * them from the structures video_events reports), the bytes of each of its
 * layers, each receiver's target (user space) and state (here). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, struct layer_templates);
} sender_templates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SFU_MAX_SENDERS * LAYERS_MAX_TARGETS);
	__type(key, __u32);
	__type(value, struct sfu_stats);
} layer_bytes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4 * SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, __u32); /* decode target; LAYERS_ALL: not adapted */
} replica_targets SEC(".maps");

/* Mapped by user space too: its slow path (what this program hands to the
 * stack) decides for the same receivers under the same claim. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 4 * SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, struct replica_layers);
} replica_adapt SEC(".maps");

/* Each simulcast video's encodings (simulcast.h), by its stream's id;
 * mapped by user space, whose slow path writes it too. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, struct sim_encodings);
} simulcast_encodings SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
	__type(value, struct video_event); /* for BTF: Go reads the records as this */
} video_events SEC(".maps");

/* Each sender's audio levels (audio_level.h), by its slot. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SFU_MAX_SENDERS);
	__type(key, __u32);
	__type(value, struct audio_level);
} audio_levels SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SFU_OUTCOME_MAX);
	__type(key, __u32);
	__type(value, struct sfu_stats);
} outcomes SEC(".maps");

#endif
