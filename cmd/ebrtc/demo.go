package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ebrtc/ebrtc/internal/demo"
)

func runDemo(args []string, stdout, stderr io.Writer) int {
	o := demo.DefaultOptions
	fs := newFlags("demo", stderr)
	fs.IntVar(&o.Clients, "clients", o.Clients, "TURN clients")
	fs.IntVar(&o.Packets, "packets", o.Packets, "datagrams per client and direction")
	fs.IntVar(&o.Size, "size", o.Size, "datagram size in bytes (16-1400)")
	fs.IntVar(&o.Rate, "rate", o.Rate, "datagrams per second per client and direction")
	fs.IntVar(&o.SFUPackets, "sfu-packets", o.SFUPackets, "RTP packets the SFU part's publisher sends (about 80/s)")
	fs.IntVar(&o.AFXDPPackets, "afxdp-packets", o.AFXDPPackets, "datagrams per receiver and round of the AF_XDP part (at 10,000/s)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ebrtc demo [flags]\n\nBuilds a namespace testbed (needs root), runs ebrtc turn with and without the XDP\nfast path and prints what each relayed; then ebrtc sfu with its eBPF and its\nuser-space data plane carrying a synthetic meeting; then an endpoint's receive\npath through AF_XDP and through a kernel socket.\n\nFlags:")
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	if o.Clients < 1 || o.Clients > 64 || o.Packets < 1 || o.Packets > 1_000_000 || o.Size < 16 || o.Size > 1400 || o.Rate < 1 || o.Rate > 200000 ||
		o.SFUPackets < 1 || o.SFUPackets > 100_000 || o.AFXDPPackets < 100 || o.AFXDPPackets > 1_000_000 {
		fmt.Fprintln(stderr, "ebrtc demo: clients 1-64, packets 1-1000000, size 16-1400, rate 1-200000, sfu-packets 1-100000, afxdp-packets 100-1000000")
		return 2
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc demo: %v\n", err)
		return 1
	}
	var err2 error
	if untilSignal(stderr, func(ctx context.Context) { err2 = demo.Run(ctx, stdout, bin, o) }) {
		return 130
	}
	if err2 != nil {
		fmt.Fprintf(stderr, "ebrtc demo: %v\n", err2)
		return 1
	}
	return 0
}
