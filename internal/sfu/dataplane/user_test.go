package dataplane

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/addrport"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

func addrOf(c *net.UDPConn) netip.AddrPort {
	return addrport.Unmap(c.LocalAddr().(*net.UDPAddr).AddrPort())
}

// The user-space data plane on loopback: media to every receiver from the
// SFU's socket, STUN and feedback up to the agent, the rest counted as the
// eBPF data plane counts it.
func TestUserPlane(t *testing.T) {
	sfu, sender := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	rcv := []*net.UDPConn{testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)}
	var mu sync.Mutex
	var up [][]byte
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}, Upcall: func(p []byte, from netip.AddrPort, c *net.UDPConn) {
		mu.Lock()
		up = append(up, bytes.Clone(p))
		mu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	testenv.Must(t, u.SetStream(addrOf(sender), audio(7), []Receiver{{From: addrOf(sfu), To: addrOf(rcv[0])}, {From: addrOf(sfu), To: addrOf(rcv[1])}}))
	if u.SetStream(addrOf(sender), audio(7), []Receiver{{From: netip.MustParseAddrPort("127.0.0.1:1"), To: addrOf(rcv[0])}}) == nil {
		t.Error("a receiver from an address with no socket was accepted")
	}
	send := func(p []byte) {
		if _, err := sender.WriteToUDP(p, net.UDPAddrFromAddrPort(addrOf(sfu))); err != nil {
			t.Fatal(err)
		}
	}
	media := rtpPacket(7, 1, 50)
	send(media)
	for i, c := range rcv {
		buf := make([]byte, 1500)
		testenv.Must(t, c.SetReadDeadline(time.Now().Add(2*time.Second)))
		n, from, err := c.ReadFromUDP(buf)
		if err != nil || !bytes.Equal(buf[:n], media) || from.AddrPort() != addrOf(sfu) {
			t.Fatalf("receiver %d: %v, from %v, same bytes %v", i, err, from, bytes.Equal(buf[:n], media))
		}
	}
	stun := []byte{0, 1, 0, 0, 0x21, 0x12, 0xa4, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	send(stun)
	send(rtpPacket(8, 1, 10))                             // unknown SSRC
	send([]byte{0x80, 96, 0, 1})                          // short
	send([]byte{0x81, 205, 0, 2, 0, 0, 0, 1, 0, 0, 0, 1}) // feedback
	testenv.Must(t, u.RemoveStream(addrOf(sender)))
	send(media)
	want := map[Outcome]uint64{Replicated: 1, Replica: 2, Stun: 1, UnknownSender: 2, Malformed: 1, RTCPToAgent: 1}
	deadline := time.Now().Add(2 * time.Second)
	for {
		o, _ := u.Outcomes()
		ok := true
		for k, v := range want {
			ok = ok && o[k].Packets == v
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("outcomes %v, want %v", o, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(up) != 2 || !bytes.Equal(up[0], stun) {
		t.Errorf("upcalls %d (want STUN then the feedback)", len(up))
	}
}

// Workers: two sockets of one SO_REUSEPORT group, each read by a goroutine
// of its own. Sixteen senders (their ports hashed over the two) reach both
// receivers whole and, per sender, in order; both workers take some, and
// each sender's datagrams go to one.
func TestUserPlaneWorkers(t *testing.T) {
	group, err := ListenGroup(netip.MustParseAddrPort("127.0.0.1:0"), 2)
	testenv.Must(t, err)
	sfu := group[0]
	if addrOf(group[1]) != addrOf(sfu) {
		t.Fatalf("a group on %v and %v", addrOf(sfu), addrOf(group[1]))
	}
	// The group is this plane's alone: another takes none of its senders.
	if other, err := ListenGroup(addrOf(sfu), 2); err == nil {
		for _, c := range other {
			c.Close()
		}
		t.Error("a second group bound the address the first holds")
	}
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}, Workers: map[*net.UDPConn][]*net.UDPConn{sfu: group[1:]}})
	testenv.Must(t, err)
	defer u.Close()
	rcv := []*net.UDPConn{testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)}
	var receivers []Receiver
	for _, r := range rcv {
		testenv.Must(t, r.SetReadBuffer(4<<20))
		receivers = append(receivers, Receiver{From: addrOf(sfu), To: addrOf(r)})
	}
	const senders, packets = 16, 50
	snd := make([]*net.UDPConn, senders)
	for i := range snd {
		snd[i] = testenv.LoopbackUDP(t)
		testenv.Must(t, u.SetStream(addrOf(snd[i]), audio(uint32(100+i)), receivers))
	}
	for seq := range packets {
		for i, c := range snd {
			if _, err := c.WriteToUDP(rtpPacket(uint32(100+i), uint16(seq), 100), net.UDPAddrFromAddrPort(addrOf(sfu))); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Millisecond) // within the sockets' buffers: what is checked is where they go
	}
	for k, r := range rcv {
		next := map[uint32]uint16{}
		buf := make([]byte, 1500)
		for range senders * packets {
			testenv.Must(t, r.SetReadDeadline(time.Now().Add(2*time.Second)))
			n, err := r.Read(buf)
			if err != nil {
				t.Fatalf("receiver %d: %v after %v", k, err, next)
			}
			ssrc, seq := binary.BigEndian.Uint32(buf[8:n]), binary.BigEndian.Uint16(buf[2:n])
			if seq != next[ssrc] {
				t.Fatalf("receiver %d: SSRC %d packet %d after %d: out of order", k, ssrc, seq, next[ssrc])
			}
			next[ssrc]++
		}
	}
	// Each sender's datagrams all on one worker: whole multiples of a sender's.
	reads := u.WorkerReads()
	if len(reads) != 2 || reads[0] == 0 || reads[1] == 0 || reads[0]+reads[1] != senders*packets || reads[0]%packets != 0 {
		t.Errorf("datagrams per worker %v: want both of %d, each a whole number of senders' %d", reads, senders*packets, packets)
	}
}
