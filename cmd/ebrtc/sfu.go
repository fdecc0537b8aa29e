package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"

	"github.com/ebrtc/ebrtc/internal/sfu"
	sfudataplane "github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
	"github.com/ebrtc/ebrtc/internal/sfu/web"
)

func runSFU(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sfu", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var media, ifaces listValue
	fs.Var(&media, "media", "media address IP:PORT, one per family: the ICE candidates (repeatable, required)")
	fs.Var(&ifaces, "iface", "interface media arrives on and leaves by: where the eBPF data plane runs, or with --rx afxdp the AF_XDP sockets (repeatable; default for afxdp: the --media address's interface)")
	listen := fs.String("listen", "127.0.0.1:8088", "web server: the meeting page and WebSocket signaling (HTTPS and WSS unless --http)")
	tlsCert := fs.String("tls-cert", "", "the web server's certificate (PEM; with --tls-key). Without: a self-signed one made on first start and kept in --state-dir")
	tlsKey := fs.String("tls-key", "", "the web server's private key (PEM)")
	stateDir := fs.String("state-dir", "/var/lib/ebrtc", "where ebrtc sfu keeps its self-signed web certificate")
	plainHTTP := fs.Bool("http", false, "serve the page over plain HTTP (behind a proxy that terminates TLS; browsers elsewhere get no camera without a secure context)")
	dataplane := fs.String("dataplane", "", "user (recvmmsg/sendmmsg, or AF_XDP with --rx afxdp; the default, and the only one for encrypted media) or ebpf (TC ingress; plain RTP: the default with --unencrypted-media)")
	workers := fs.Int("workers", 0, "sockets per media address on the user data plane's kernel receive (one SO_REUSEPORT group), each read by a worker of its own: 0 for one per CPU the process may use, up to 8; at most 64 (--dataplane ebpf and --rx afxdp take 1)")
	rx := fs.String("rx", "kernel", "how the user data plane receives: kernel (recvmmsg) or afxdp (AF_XDP sockets fed by an XDP classifier; --dataplane user only)")
	noRA := fs.Bool("no-rate-adaptation", false, "send every receiver every layer (default: each receiver's temporal layers follow its link's estimate, and its video pauses when even the lowest does not fit)")
	video := fs.String("video-codec", signaling.DefaultCodecs.Video, "the one video codec negotiated: AV1, VP8, VP9 or H264 (the data plane finds their key frames)")
	audio := fs.String("audio-codec", signaling.DefaultCodecs.Audio, "the one audio codec negotiated")
	metricsListen := fs.String("metrics-listen", "", "Prometheus endpoint IP:PORT (empty: off)")
	metricsLabels := fs.String("metrics-labels", "none", "rate control's series: none (summed over receivers) or receiver (a series per sender and receiver)")
	adminListen := fs.String("admin-listen", "", "admin endpoint for 'ebrtc top': unix:PATH or a loopback IP:PORT (empty: off)")
	newLog := logFlags(fs)
	unencrypted := fs.Bool("unencrypted-media", false, "forward plain RTP (browsers with their encryption off: Chromium's --disable-webrtc-encryption), which the eBPF data plane can; only on trusted networks (docs/sfu.md)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ebrtc sfu --media IP:PORT [flags]\n\nA selective forwarding unit. Browsers join at the web address as they ship: every\nconnection is DTLS-SRTP, decrypted once and encrypted per receiver on the user-space\ndata plane (AF_XDP with --rx afxdp). With --unencrypted-media it forwards plain RTP,\nin eBPF at TC ingress (--iface; needs root).\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	logger, err := newLog(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc sfu: %v\n", err)
		return 2
	}
	cfg := sfu.Config{Ready: func(net.Addr, sfudataplane.Plane) { fmt.Fprintln(stdout, "ready") }, Listen: *listen, Ifaces: ifaces, Dataplane: *dataplane, Unencrypted: *unencrypted, RX: *rx, Workers: *workers, NoRateAdaptation: *noRA, MetricsListen: *metricsListen, MetricsLabels: *metricsLabels, AdminListen: *adminListen,
		Codecs: signaling.Codecs{Audio: *audio, Video: *video}, Log: logger}
	cfg.Web = web.TLS{CertFile: *tlsCert, KeyFile: *tlsKey, Dir: *stateDir, Plain: *plainHTTP}
	if host, _, err := net.SplitHostPort(*listen); err == nil && host != "" {
		cfg.Web.Hosts = append(cfg.Web.Hosts, host)
	}
	for _, m := range media {
		ap, err := netip.ParseAddrPort(m)
		if err != nil {
			fmt.Fprintf(stderr, "ebrtc sfu: media: %v\n", err)
			return 2
		}
		cfg.Media = append(cfg.Media, ap)
		cfg.Web.Hosts = append(cfg.Web.Hosts, ap.Addr().String())
	}
	var runErr error
	untilSignal(stderr, func(ctx context.Context) { runErr = sfu.Run(ctx, cfg) })
	if runErr != nil {
		fmt.Fprintln(stderr, "ebrtc sfu:", runErr)
		return 1
	}
	return 0
}
