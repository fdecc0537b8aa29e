package testbed

import (
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/pion/dtls/v3"
	"github.com/pion/logging"
	"github.com/pion/turn/v5"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/netns"
)

// TURNClient is a pion TURN client with a relay allocation, its socket in a namespace.
type TURNClient struct {
	Client *turn.Client
	Relay  net.PacketConn
	conn   net.PacketConn
	close  sync.Once
}

// ClientOptions select the server, transport, credentials and relay family.
type ClientOptions struct {
	Server     netip.AddrPort
	Transport  string // udp (default), tcp, tls or dtls; the relay is UDP in every case
	Local      netip.Addr
	User, Pass string
	Realm      string
	Family     turn.RequestedAddressFamily // 0: the client's family
}

// clientConn opens the client's connection to the server from inside ns.
// Stream and DTLS transports carry STUN framing, which STUNConn undoes.
func clientConn(ns *netns.NS, o ClientOptions) (net.PacketConn, error) {
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the testbed's own self-signed certificate
	switch o.Transport {
	case "", "udp":
		return ListenUDP(ns, netip.AddrPortFrom(o.Local, 0))
	case "tcp", "tls":
		var c net.Conn
		err := ns.Do(func() error {
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: o.Local.AsSlice()}, Timeout: 5 * time.Second}
			var err error
			if c, err = d.Dial("tcp", o.Server.String()); err == nil && o.Transport == "tls" {
				c = tls.Client(c, insecure)
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		return turn.NewSTUNConn(c), nil
	case "dtls":
		udp, err := ListenUDP(ns, netip.AddrPortFrom(o.Local, 0))
		if err != nil {
			return nil, err
		}
		c, err := dtls.Client(udp, net.UDPAddrFromAddrPort(o.Server), &dtls.Config{InsecureSkipVerify: true})
		if err != nil {
			udp.Close()
			return nil, err
		}
		return turn.NewSTUNConn(c), nil
	}
	return nil, fmt.Errorf("unknown transport %q", o.Transport)
}

// NewTURNClient allocates a relay on the server from inside ns.
func NewTURNClient(ns *netns.NS, o ClientOptions) (*TURNClient, error) {
	conn, err := clientConn(ns, o)
	if err != nil {
		return nil, err
	}
	lf := logging.NewDefaultLoggerFactory()
	lf.DefaultLogLevel = logging.LogLevelError
	c, err := turn.NewClient(&turn.ClientConfig{
		TURNServerAddr: o.Server.String(), STUNServerAddr: o.Server.String(),
		Username: o.User, Password: o.Pass, Realm: o.Realm,
		Conn: conn, LoggerFactory: lf, RequestedAddressFamily: o.Family,
	})
	if err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.Listen(); err != nil {
		c.Close()
		conn.Close()
		return nil, err
	}
	relay, err := c.Allocate()
	if err != nil {
		c.Close()
		conn.Close()
		return nil, fmt.Errorf("allocate: %w", err)
	}
	return &TURNClient{Client: c, Relay: relay, conn: conn}, nil
}

// RelayAddr is the allocation's relayed address.
func (c *TURNClient) RelayAddr() netip.AddrPort {
	ap, _ := netip.ParseAddrPort(c.Relay.LocalAddr().String())
	return addrport.Unmap(ap)
}

// Close releases the allocation (Refresh with lifetime 0) and the socket.
// Calling it again does nothing.
func (c *TURNClient) Close() {
	c.close.Do(func() {
		_ = c.Relay.Close()
		c.Client.Close()
		_ = c.conn.Close()
	})
}

// Result of an exchange of numbered datagrams.
type Result struct {
	Sent, Received, Corrupt, Duplicate int
	Elapsed                            time.Duration
}

// Lost is how many sent datagrams never arrived.
func (r Result) Lost() int { return r.Sent - r.Received }

func (r Result) String() string {
	return fmt.Sprintf("sent %d received %d lost %d corrupt %d duplicate %d", r.Sent, r.Received, r.Lost(), r.Corrupt, r.Duplicate)
}

// DefaultRate is the pace of Exchange: slow enough that the test endpoints
// (pion's client queues 1024 datagrams), not the relay, never decide the loss.
const DefaultRate = 40000

// Exchange sends n numbered datagrams of size bytes from src to dst at
// DefaultRate and checks at recv that each arrives once and intact.
func Exchange(src net.PacketConn, dst net.Addr, recv net.PacketConn, n, size int) (Result, error) {
	return ExchangeAt(src, dst, recv, n, size, DefaultRate)
}

// ExchangeAt is Exchange at rate datagrams per second, sent in bursts of 16.
func ExchangeAt(src net.PacketConn, dst net.Addr, recv net.PacketConn, n, size, rate int) (Result, error) {
	if size < 16 {
		return Result{}, errors.New("exchange: size must be at least 16")
	}
	res := Result{Sent: n}
	seen := make([]bool, n)
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, 65536)
		for res.Received+res.Corrupt+res.Duplicate < n {
			_ = recv.SetReadDeadline(time.Now().Add(time.Second))
			m, _, err := recv.ReadFrom(buf)
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					done <- nil
					return
				}
				done <- err
				return
			}
			seq, ok := checkDatagram(buf[:m], size)
			switch {
			case !ok || seq >= n:
				res.Corrupt++
			case seen[seq]:
				res.Duplicate++
			default:
				seen[seq] = true
				res.Received++
			}
		}
		done <- nil
	}()
	start := time.Now()
	buf := make([]byte, size)
	for i := range n {
		fillDatagram(buf, i)
		if _, err := src.WriteTo(buf, dst); err != nil {
			<-done // the receiver still writes res until it times out
			return res, fmt.Errorf("exchange: send %d: %w", i, err)
		}
		if i%16 == 15 {
			due := start.Add(time.Duration(i+1) * time.Second / time.Duration(rate))
			time.Sleep(time.Until(due))
		}
	}
	err := <-done
	res.Elapsed = time.Since(start)
	_ = recv.SetReadDeadline(time.Time{})
	return res, err
}

// fillDatagram writes the sequence number, then a pattern derived from it.
func fillDatagram(b []byte, seq int) {
	binary.BigEndian.PutUint64(b, uint64(seq))
	binary.BigEndian.PutUint64(b[8:], uint64(len(b)))
	for i := 16; i < len(b); i++ {
		b[i] = byte(seq*7 + i)
	}
}

func checkDatagram(b []byte, size int) (int, bool) {
	if len(b) != size || binary.BigEndian.Uint64(b[8:]) != uint64(size) {
		return 0, false
	}
	seq := int(binary.BigEndian.Uint64(b))
	for i := 16; i < len(b); i++ {
		if b[i] != byte(seq*7+i) {
			return seq, false
		}
	}
	return seq, true
}
