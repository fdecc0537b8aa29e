// Package metrics serves Prometheus metrics, with the collectors and
// helpers the commands share. It is a leaf: each domain keeps its own
// collector beside it (offload.Collector, admin.UserCollector,
// sfu.Collector, afxdp.Collector), as Cilium's pkg/metrics does.
package metrics

import (
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Serve exposes the collectors, and the process's own (Go runtime, memory,
// file descriptors), at http://addr/metrics until the returned server is closed.
func Serve(addr string, cs ...prometheus.Collector) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	cs = append(cs, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}
