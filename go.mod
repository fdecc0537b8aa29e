module github.com/ebrtc/ebrtc

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	golang.org/x/sys v0.48.0
)

require golang.org/x/net v0.59.0 // indirect
