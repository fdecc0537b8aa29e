package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu"
	"github.com/ebrtc/ebrtc/internal/sfu/access"
	sfudataplane "github.com/ebrtc/ebrtc/internal/sfu/dataplane"
	"github.com/ebrtc/ebrtc/internal/sfu/signaling"
	"github.com/ebrtc/ebrtc/internal/sfu/web"
)

func runSFU(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "token" {
		return runSFUToken(args[1:], stdout, stderr)
	}
	fs := newFlags("sfu", stderr)
	var media, ifaces, origins listValue
	secret := tokenSecretFlags(fs)
	turnSecret := secretFlags(fs, "turn-secret", "file holding the TURN REST API secret shared with ebrtc turn --auth-secret (or coturn's static-auth-secret): each participant is handed short-lived TURN credentials with --turn-url")
	var turnURLs listValue
	fs.Var(&turnURLs, "turn-url", "a TURN server's URL handed to participants, e.g. turn:turn.example.com:3478?transport=tcp or turns:turn.example.com:443?transport=tcp (repeatable; needs --turn-secret-file): a participant whose network blocks UDP joins through it")
	turnTTL := fs.Duration("turn-ttl", 12*time.Hour, "how long the TURN credentials a participant is handed stay valid (its allocations' refreshes need them: longer than a meeting)")
	openRooms := fs.Bool("open-rooms", false, "let anyone who reaches the page join any room without a token (trusted networks, trying it out); without it the server needs --token-secret-file")
	fs.Var(&origins, "allowed-origin", "another site whose pages may open signaling: a host pattern (meet.example.com, *.example.com) or an origin (https://meet.example.com) (repeatable; the SFU's own pages always may)")
	maxRooms := fs.Int("max-rooms", 1000, "rooms at once; a join that would open one more is refused")
	maxParticipants := fs.Int("max-participants", 500, "participants in one room; a join past it is refused")
	joinRate := fs.Float64("join-rate", 5, "joins a second from one address (an IPv6 /64 is one), refilling a bucket of --join-burst")
	joinBurst := fs.Int("join-burst", 20, "joins at once from one address")
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
	startKbps := fs.Int("publisher-start-kbps", 0, "the uplink estimate a publisher's Chromium starts from, 100-10000 (x-google-start-bitrate; 0: the browser's own, 300)")
	lastN := fs.Int("last-n", 0, "give each receiver video from its N most recent speakers only, the others paused, audio always (0: everyone's video)")
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
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	logger, err := newLog(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc sfu: %v\n", err)
		return 2
	}
	key, err := secret.load(false)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc sfu: %v\n", err)
		return 2
	}
	turnKey, err := turnSecret.load(len(turnURLs) > 0)
	if err != nil {
		fmt.Fprintf(stderr, "ebrtc sfu: %v (with --turn-url)\n", err)
		return 2
	}
	cfg := sfu.Config{Ready: func(net.Addr, sfudataplane.Plane) { fmt.Fprintln(stdout, "ready") }, Listen: *listen, Ifaces: ifaces, Dataplane: *dataplane, Unencrypted: *unencrypted, RX: *rx, Workers: *workers, NoRateAdaptation: *noRA, PublisherStartKbps: *startKbps, LastN: *lastN, MetricsListen: *metricsListen, MetricsLabels: *metricsLabels, AdminListen: *adminListen,
		Codecs: signaling.Codecs{Audio: *audio, Video: *video}, Log: logger,
		Access:         access.Config{Secret: key, Open: *openRooms, JoinRate: *joinRate, JoinBurst: *joinBurst},
		AllowedOrigins: origins, MaxRooms: *maxRooms, MaxParticipants: *maxParticipants,
		TURN: sfu.TURN{URLs: turnURLs, Secret: turnKey, TTL: *turnTTL}}
	if *maxRooms < 1 || *maxParticipants < 1 || *joinRate <= 0 || *joinBurst < 1 {
		fmt.Fprintln(stderr, "ebrtc sfu: max-rooms, max-participants, join-rate, join-burst: want positive numbers")
		return 2
	}
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

// secretSource is where a secret comes from: a file (--NAME-file, the
// way to keep it out of ps) or the flag itself (--NAME).
type secretSource struct {
	name        string
	file, value *string
}

// tokenSecretFlags: the secret join tokens are signed with.
func tokenSecretFlags(fs *flag.FlagSet) secretSource {
	return secretFlags(fs, "token-secret", "file holding the secret that signs join tokens (at least 32 bytes; e.g. head -c 32 /dev/urandom | base64 > FILE); ebrtc sfu token mints them")
}

func secretFlags(fs *flag.FlagSet, name, fileUsage string) secretSource {
	return secretSource{name: name,
		file:  fs.String(name+"-file", "", fileUsage),
		value: fs.String(name, "", "the secret itself (visible to every local user in ps: prefer --"+name+"-file)"),
	}
}

// load reads the secret; none is nil unless required.
func (s secretSource) load(required bool) ([]byte, error) {
	switch {
	case *s.file != "" && *s.value != "":
		return nil, fmt.Errorf("%s: give --%s-file or --%s, not both", s.name, s.name, s.name)
	case *s.value != "":
		return []byte(*s.value), nil
	case *s.file != "":
		b, err := os.ReadFile(*s.file)
		if err != nil {
			return nil, fmt.Errorf("%s-file: %w", s.name, err)
		}
		// The file's bytes are the secret (a line of base64 is used as the
		// text it is); one line end, as an editor leaves it, is not.
		b, _ = bytes.CutSuffix(b, []byte("\n"))
		b, _ = bytes.CutSuffix(b, []byte("\r"))
		return b, nil
	case required:
		return nil, fmt.Errorf("%s-file: the secret is needed", s.name)
	}
	return nil, nil
}

// runSFUToken is `ebrtc sfu token`: it mints a join token (a meeting
// app's server does the same with any JWT library: access's format).
func runSFUToken(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("sfu token", stderr)
	secret := tokenSecretFlags(fs)
	room := fs.String("room", "", "the room the token joins (required)")
	identity := fs.String("identity", "", "who joins: unique in the room, a second join of it replaces the first (required)")
	name := fs.String("name", "", "the name the others see (default: the identity)")
	ttl := fs.Duration("ttl", time.Hour, "how long the token may be used to join (and its rejoins, by reload, to follow); at most 24h")
	viewer := fs.Bool("viewer", false, "receive only: the token does not let its participant publish")
	page := fs.String("url", "", "the SFU's page (e.g. https://meet.example.com:8088/): print the page's address with the token instead of the token")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: ebrtc sfu token --token-secret-file FILE --room R --identity I [flags]\n\nMints a join token, good for one join (its rejoins come with the join).\n\nFlags:")
		fs.PrintDefaults()
	}
	if status, ok := parseFlags(fs, args); !ok {
		return status
	}
	key, err := secret.load(true)
	if err == nil {
		var tok string
		tok, err = access.Mint(key, access.Grant{Room: *room, Identity: *identity, Name: *name, Publish: !*viewer}, time.Now(), *ttl)
		if err == nil && *page != "" {
			var u *url.URL
			if u, err = url.Parse(*page); err == nil {
				u.RawQuery = url.Values{"token": {tok}}.Encode()
				tok = u.String()
			}
		}
		if err == nil {
			fmt.Fprintln(stdout, tok)
			return 0
		}
	}
	fmt.Fprintf(stderr, "ebrtc sfu token: %v\n", err)
	return 2
}
