package dataplane

import (
	"bytes"
	"crypto/rand"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/srtp/v3"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// keyPair is one connection's SRTP as both its ends hold it (pion/srtp,
// fresh random keys): the browser's side and the SFU's Protection.
type keyPair struct {
	browserOut, browserIn *srtp.Context // seals what the browser sends, opens what it gets
	sfu                   *srtpProtection
	upKey, upSalt         []byte
}

// sfuKeys are the arguments of a context opening what the browser seals.
func (k *keyPair) sfuKeys() ([]byte, []byte, srtp.ProtectionProfile) {
	return k.upKey, k.upSalt, srtp.ProtectionProfileAeadAes128Gcm
}

// srtpProtection is a Protection over pion/srtp contexts, as
// secure.Transport's (which needs a DTLS handshake to get its keys).
type srtpProtection struct {
	mu        sync.Mutex
	open, out *srtp.Context
	rtp       rtp.Header
	rtcp      rtcp.Header
}

func (p *srtpProtection) Open(dst, b []byte) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(b) > 1 && b[1] >= 192 && b[1] <= 223 {
		return p.open.DecryptRTCP(dst, b, &p.rtcp)
	}
	return p.open.DecryptRTP(dst, b, &p.rtp)
}

func (p *srtpProtection) Overhead() int { return 16 }

func (p *srtpProtection) Seal(dst, b []byte) ([]byte, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(b) > 1 && b[1] >= 192 && b[1] <= 223 {
		return p.out.EncryptRTCP(dst, b, &p.rtcp)
	}
	return p.out.EncryptRTP(dst, b, &p.rtp)
}

func newKeyPair(t testing.TB) *keyPair {
	t.Helper()
	profile := srtp.ProtectionProfileAeadAes128Gcm
	key := func() ([]byte, []byte) {
		k, s := make([]byte, 16), make([]byte, 12)
		rand.Read(k)
		rand.Read(s)
		return k, s
	}
	up, upSalt := key()
	down, downSalt := key()
	ctx := func(k, s []byte, opts ...srtp.ContextOption) *srtp.Context {
		c, err := srtp.CreateContext(k, s, profile, opts...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	return &keyPair{browserOut: ctx(up, upSalt), browserIn: ctx(down, downSalt), upKey: up, upSalt: upSalt,
		sfu: &srtpProtection{open: ctx(up, upSalt, srtp.SRTPReplayProtection(64), srtp.SRTCPReplayProtection(64)), out: ctx(down, downSalt)}}
}

// An encrypted user plane on loopback: RTP from a sender with keys is
// opened once and each receiver gets it sealed with its own keys (the
// other receiver's keys do not open it), the same packet underneath;
// the SFU's own packets are sealed too; a receiver without keys gets
// nothing and the others lose nothing; RTP from an address without keys,
// a replay and a forged tag are dropped and counted; DTLS goes up.
func TestUserPlaneEncrypted(t *testing.T) {
	sfu, sender, stranger := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	rcv := []*net.UDPConn{testenv.LoopbackUDP(t), testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)}
	var mu sync.Mutex
	var up [][]byte
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}, Encrypted: true, Upcall: func(p []byte, _ netip.AddrPort, _ *net.UDPConn) {
		mu.Lock()
		up = append(up, bytes.Clone(p))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	from := addrOf(sfu)
	keys := map[netip.AddrPort]*keyPair{addrOf(sender): newKeyPair(t), addrOf(rcv[0]): newKeyPair(t), addrOf(rcv[1]): newKeyPair(t)}
	for a, k := range keys {
		testenv.Must(t, u.Protect(a, k.sfu))
	}
	var receivers []Receiver
	for _, c := range rcv {
		receivers = append(receivers, Receiver{From: from, To: addrOf(c)})
	}
	testenv.Must(t, u.SetStream(addrOf(sender), audio(7), receivers))
	send := func(c *net.UDPConn, p []byte) {
		if _, err := c.WriteToUDPAddrPort(p, from); err != nil {
			t.Fatal(err)
		}
	}
	plain := rtpPacket(7, 1, 300)
	sealed, err := keys[addrOf(sender)].browserOut.EncryptRTP(nil, plain, nil)
	testenv.Must(t, err)
	send(sender, sealed)
	var got [2][]byte
	for i := range 2 {
		buf := make([]byte, 1500)
		testenv.Must(t, rcv[i].SetReadDeadline(time.Now().Add(2*time.Second)))
		n, _, err := rcv[i].ReadFromUDP(buf)
		testenv.Must(t, err)
		got[i] = buf[:n]
		if bytes.Contains(got[i], plain[12:]) {
			t.Fatalf("receiver %d got the payload in the clear", i)
		}
		opened, err := keys[addrOf(rcv[i])].browserIn.DecryptRTP(nil, got[i], nil)
		if err != nil || !bytes.Equal(opened, plain) {
			t.Fatalf("receiver %d cannot open its replica to the packet sent: %v", i, err)
		}
	}
	if _, err := keys[addrOf(rcv[1])].browserIn.DecryptRTP(nil, got[0], nil); err == nil {
		t.Error("receiver 1's keys open receiver 0's replica")
	}
	testenv.Must(t, rcv[2].SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	if n, _, err := rcv[2].ReadFromUDP(make([]byte, 1500)); err == nil {
		t.Errorf("the receiver without keys got %d bytes", n)
	}
	// The SFU's own packets: sealed for their receiver, refused without keys.
	pli := []byte{0x81, 206, 0, 2, 0, 0, 0, 1, 0, 0, 0, 7}
	testenv.Must(t, u.Send(pli, from, addrOf(sender)))
	buf := make([]byte, 1500)
	testenv.Must(t, sender.SetReadDeadline(time.Now().Add(2*time.Second)))
	n, _, err := sender.ReadFromUDP(buf)
	testenv.Must(t, err)
	senderIn := keys[addrOf(sender)].browserIn
	if opened, err := senderIn.DecryptRTCP(nil, buf[:n], nil); err != nil || !bytes.Equal(opened, pli) {
		t.Errorf("the SFU's PLI: %v", err)
	}
	if u.Send(pli, from, addrOf(rcv[2])) == nil {
		t.Error("an RTCP packet for an address without keys was sent")
	}
	// What is dropped.
	before, _ := u.Outcomes()
	send(sender, sealed) // a replay
	forged := bytes.Clone(sealed)
	forged[len(forged)-1] ^= 1
	send(sender, forged)
	send(stranger, sealed) // (held a second, as a connection's before its keys and stream: early.go)
	send(sender, []byte{22, 0xfe, 0xfd, 0, 0})
	want := map[Outcome]uint64{Unauthentic: 2, Unprotected: 1, DTLS: 1}
	deadline := time.Now().Add(3 * time.Second)
	for {
		o, _ := u.Outcomes()
		ok := true
		for k, v := range want {
			ok = ok && o[k].Packets-before[k].Packets == v
		}
		if ok && o[Replicated].Packets == 1 && o[Replica].Packets == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outcomes %v, want %v more than %v, one packet replicated twice", o, want, before)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i := range 2 {
		testenv.Must(t, rcv[i].SetReadDeadline(time.Now().Add(100*time.Millisecond)))
		if n, _, err := rcv[i].ReadFromUDP(make([]byte, 1500)); err == nil {
			t.Errorf("receiver %d got %d more bytes", i, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(up) != 1 || up[0][0] != 22 {
		t.Errorf("upcalls %d, want the DTLS record", len(up))
	}
	// Another connection's keys are not taken away by this one's
	// leaving; the sender's own keys go, and its media is dropped from
	// then on.
	u.Unprotect(addrOf(sender), keys[addrOf(rcv[0])].sfu)
	if u.fwd.keys.of(addrOf(sender)) == nil {
		t.Fatal("another connection's Unprotect took the sender's keys")
	}
	u.Unprotect(addrOf(sender), keys[addrOf(sender)].sfu)
	p2, _ := keys[addrOf(sender)].browserOut.EncryptRTP(nil, rtpPacket(7, 2, 300), nil)
	send(sender, p2)
	time.Sleep(100 * time.Millisecond)
	if o, _ := u.Outcomes(); o[Unprotected].Packets-before[Unprotected].Packets != 2 {
		t.Errorf("media after its keys went: unprotected %d", o[Unprotected].Packets-before[Unprotected].Packets)
	}
}

// A plain user plane takes no keys.
func TestPlainPlaneRefusesKeys(t *testing.T) {
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{testenv.LoopbackUDP(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	if u.Protect(netip.MustParseAddrPort("127.0.0.1:5"), newKeyPair(t).sfu) == nil {
		t.Error("a plain plane took keys")
	}
}

// FuzzEncryptedDemux feeds any datagram from a sender with keys to an
// encrypted plane's demultiplexer: it never panics, and nothing reaches a
// receiver (the seeds are the sender's own SRTP and SRTCP, already
// received once, so even they are replays: only a packet sealed with the
// sender's keys and never seen could be forwarded).
func FuzzEncryptedDemux(f *testing.F) {
	sfu, rcv := testenv.LoopbackUDP(f), testenv.LoopbackUDP(f)
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}, Encrypted: true, Upcall: func([]byte, netip.AddrPort, *net.UDPConn) {}})
	if err != nil {
		f.Fatal(err)
	}
	defer u.Close()
	from := netip.MustParseAddrPort("127.0.0.1:9")
	k := newKeyPair(f)
	testenv.Must(f, u.Protect(from, k.sfu))
	testenv.Must(f, u.SetStream(from, audio(7), []Receiver{{From: addrOf(sfu), To: addrOf(rcv)}}))
	c := u.fwd.conns[addrOf(sfu)]
	b := newReplicaBatch(true)
	for seq := uint16(1); seq < 4; seq++ {
		sealed, err := k.browserOut.EncryptRTP(nil, rtpPacket(7, seq, 40*int(seq)), nil)
		testenv.Must(f, err)
		u.handle(c, bytes.Clone(sealed), from, b) // received once: replays from now on
		f.Add(sealed)
	}
	sr, _ := k.browserOut.EncryptRTCP(nil, []byte{0x80, 200, 0, 6, 0, 0, 0, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 0, 0, 1, 0, 0, 0, 2}, nil)
	u.handle(c, bytes.Clone(sr), from, b)
	f.Add(sr)
	f.Add([]byte{22, 0xfe, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1})
	f.Add([]byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42})
	before, _ := u.Outcomes()
	f.Fuzz(func(t *testing.T, p []byte) {
		u.handle(c, bytes.Clone(p), from, b)
		o, _ := u.Outcomes()
		if o[Replicated].Packets != before[Replicated].Packets || o[Replica].Packets != before[Replica].Packets {
			t.Fatalf("forwarded % x", p)
		}
	})
}

// BenchmarkForward is the user plane's cost per replica of a 1,100-byte
// packet to 10 receivers through loopback sockets (sendmmsg), plain and
// encrypted (opened once, sealed per receiver with AES-GCM): ns/op is one
// replica, so the two sub-benchmarks compare side by side.
func BenchmarkForward(b *testing.B) {
	const receivers = 10
	for _, encrypted := range []bool{false, true} {
		b.Run(map[bool]string{false: "plain", true: "encrypted"}[encrypted], func(b *testing.B) {
			sfu := testenv.LoopbackUDP(b)
			u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}, Encrypted: encrypted})
			if err != nil {
				b.Fatal(err)
			}
			defer u.Close()
			from := netip.MustParseAddrPort("127.0.0.1:9")
			k := newKeyPair(b)
			k.sfu.open, _ = srtp.CreateContext(k.sfuKeys()) // no replay window: the benchmark repeats numbers
			var rs []Receiver
			for range receivers {
				c := testenv.LoopbackUDP(b) // nobody reads: the kernel drops what overflows its buffer
				rs = append(rs, Receiver{From: addrOf(sfu), To: addrOf(c)})
				if encrypted {
					testenv.Must(b, u.Protect(addrOf(c), newKeyPair(b).sfu))
				}
			}
			if encrypted {
				testenv.Must(b, u.Protect(from, k.sfu))
			}
			testenv.Must(b, u.SetStream(from, audio(7), rs))
			c, batch := u.fwd.conns[addrOf(sfu)], newReplicaBatch(encrypted)
			p := rtpPacket(7, 1, 1100)
			if encrypted {
				p, _ = k.browserOut.EncryptRTP(nil, p, nil)
			}
			in := make([]byte, len(p))
			b.SetBytes(int64(len(p)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N / receivers {
				copy(in, p) // (a read would put it there)
				u.handle(c, in, from, batch)
			}
			b.StopTimer()
			if o, _ := u.Outcomes(); o[Replica].Packets < uint64(b.N/receivers*receivers) {
				b.Fatalf("%d replicas of %d", o[Replica].Packets, b.N/receivers*receivers)
			}
		})
	}
}
