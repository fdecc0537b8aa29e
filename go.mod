module github.com/ebrtc/ebrtc

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	github.com/pion/dtls/v3 v3.1.9
	github.com/pion/logging v0.2.4
	github.com/pion/turn/v5 v5.1.2
	github.com/prometheus/client_golang v1.25.0
	golang.org/x/sys v0.48.0
	gopkg.in/yaml.v3 v3.0.1
)

require (
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pion/randutil v0.1.0 // indirect
	github.com/pion/stun/v4 v4.0.1 // indirect
	github.com/pion/transport/v5 v5.0.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.72.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/wlynxg/anet v0.0.5 // indirect
	golang.org/x/crypto v0.57.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
