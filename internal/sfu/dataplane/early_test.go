package dataplane

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// A publisher's first packets, sent before the SFU has its keys and its
// stream (the browser's DTLS side finished first), are held and handled
// before its first packet after the stream is installed (by the worker
// that reads it): forwarded to the receivers in order, their
// transport-wide numbers logged with the times the kernel received them
// (before the stream was installed), each counted once. A stranger's are
// dropped unhandled after earlyFor, counted then.
func TestEarlyDatagramsHandledWhenTheStreamComes(t *testing.T) {
	sfu, sender, receiver, stranger := testenv.LoopbackUDP(t), testenv.LoopbackUDP(t), testenv.LoopbackUDP(t), testenv.LoopbackUDP(t)
	u, err := NewUser(UserConfig{Conns: []*net.UDPConn{sfu}, Encrypted: true})
	testenv.Must(t, err)
	t.Cleanup(func() { u.Close() })
	from, to := addrOf(sender), addrOf(receiver)
	keys := map[netip.AddrPort]*keyPair{from: newKeyPair(t), to: newKeyPair(t)}
	send := func(c *net.UDPConn, p []byte) {
		t.Helper()
		if _, err := c.WriteToUDPAddrPort(p, addrOf(sfu)); err != nil {
			t.Fatal(err)
		}
	}
	var plain [][]byte
	sendMedia := func(i int, strangerToo bool) {
		p := twccPacket(7, uint16(10+i), uint16(500+i), 1, 100)
		plain = append(plain, p)
		sealed, err := keys[from].browserOut.EncryptRTP(nil, p, nil)
		testenv.Must(t, err)
		send(sender, sealed)
		if strangerToo {
			send(stranger, sealed)
		}
	}
	for i := range 3 {
		sendMedia(i, true)
	}
	time.Sleep(150 * time.Millisecond)
	installedAt := MonoNow()
	o, _ := u.Outcomes()
	if o[Unprotected].Packets != 0 || o[Replicated].Packets != 0 {
		t.Fatalf("before the keys: unprotected %d, replicated %d (want both held)", o[Unprotected].Packets, o[Replicated].Packets)
	}
	for a, k := range keys {
		testenv.Must(t, u.Protect(a, k.sfu))
	}
	testenv.Must(t, u.SetStream(from, []Source{{SSRC: 7, TWCCExt: twccExt}}, []Receiver{{From: addrOf(sfu), To: to}}))
	log, err := u.Arrivals(from)
	testenv.Must(t, err)
	sendMedia(3, false)
	for i := range 4 {
		buf := make([]byte, 1500)
		testenv.Must(t, receiver.SetReadDeadline(time.Now().Add(2*time.Second)))
		n, _, err := receiver.ReadFromUDP(buf)
		testenv.Must(t, err)
		opened, err := keys[to].browserIn.DecryptRTP(nil, buf[:n], nil)
		if err != nil || !bytes.Equal(opened, plain[i]) {
			t.Fatalf("replica %d: %v, the packet sent: %v", i, err, bytes.Equal(opened, plain[i]))
		}
	}
	got := log.Read()
	if len(got) != 4 {
		t.Fatalf("arrivals %+v, want 500-503", got)
	}
	for i, a := range got[:3] {
		if a.Seq != uint16(500+i) || a.At >= installedAt || installedAt-a.At > time.Second {
			t.Errorf("arrival %+v: want %d, received before the stream came (%v)", a, 500+i, installedAt)
		}
	}
	time.Sleep(earlyFor + 100*time.Millisecond)
	o, _ = u.Outcomes()
	if o[Unprotected].Packets != 3 || o[Replicated].Packets != 4 {
		t.Errorf("unprotected %d (want the stranger's 3), replicated %d (want 4)", o[Unprotected].Packets, o[Replicated].Packets)
	}
}
