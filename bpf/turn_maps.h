/* The TURN fast path's maps (bpf/turn_offload.c, both builds): the
 * channels' routes both ways, their counters and rate buckets, the
 * configuration, the interfaces it runs on and may redirect to, the
 * snooper's ring. Their layouts are turn.h's and ratelimit.h's; user space
 * (internal/offload) installs and reads them. */
#ifndef EBRTC_TURN_MAPS_H
#define EBRTC_TURN_MAPS_H

#include "common.h"
#include "turn.h"
#include "ratelimit.h"
#include "outcome.h"

#define MAX_CHANNELS 65536

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CHANNELS);
	__type(key, struct client_key_v4);
	__type(value, struct route);
} client_routes_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CHANNELS);
	__type(key, struct client_key_v6);
	__type(value, struct route);
} client_routes_v6 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CHANNELS);
	__type(key, struct peer_key_v4);
	__type(value, struct route);
} peer_routes_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_CHANNELS);
	__type(key, struct peer_key_v6);
	__type(value, struct route);
} peer_routes_v6 SEC(".maps");

/* Per channel and direction; slots are handed out by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2 * MAX_CHANNELS);
	__type(key, __u32);
	__type(value, struct flow_stats);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, OUT_MAX);
	__type(key, __u32);
	__type(value, struct outcome_stats);
} outcomes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offload_config);
} config SEC(".maps");

/* Bumped whenever the interfaces table changes (by user space, and here
 * when an interface is found to take no XDP frames): the paths cached in
 * the flows slots hold what the table said, valid while it is unchanged. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} iface_gen SEC(".maps");

/* Bandwidth limits: one bucket per allocation and direction, shared by its
 * channels and by every CPU; indexes are handed out by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * MAX_CHANNELS);
	__type(key, __u32);
	__type(value, struct rate_bucket);
} rate_buckets SEC(".maps");

/* The interfaces the program runs on, by ifindex: MAC address, hooks, and
 * XDP frames they did not take. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_IFACES);
	__type(key, __u32);
	__type(value, struct iface_info);
} ifaces SEC(".maps");

/* What the snooper parsed from TURN control messages (CONFIG_F_SNOOP). One
 * ring for both hooks keeps requests and responses in commit order. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} snoop_events SEC(".maps");

/* Interfaces the program may redirect to (ifindex -> ifindex). */
struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} egress_ports SEC(".maps");

#ifndef EBRTC_TC
/* XDP frames sent per egress slot and CPU, by kind, until the device's
 * queue flushes (bpf/turn_xmit.c charges refused ones to their kind). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_IFACE_SLOTS);
	__type(key, __u32);
	__type(value, struct xmit_pending);
} xmit_pending SEC(".maps");
#endif

#endif
