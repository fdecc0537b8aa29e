package handover

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// The test binary is its own successor when started by Start.
func TestMain(m *testing.M) {
	if mode := os.Getenv("HANDOVER_TEST_SUCCESSOR"); mode != "" {
		os.Exit(successor(mode))
	}
	os.Exit(m.Run())
}

// successor takes the state and a UDP socket, answers the datagram waiting
// in it with the state prepended, and says it serves (or, in mode "fail",
// that it failed).
func successor(mode string) int {
	pred, err := Inherited()
	if err != nil || pred == nil {
		return 2
	}
	state, files, err := pred.Receive(10 * time.Second)
	if err != nil || len(files) != 1 {
		return 3
	}
	if mode == "fail" {
		pred.Failed(errors.New("no luck"))
		return 0
	}
	conn, err := net.FilePacketConn(files[0])
	if err != nil {
		return 4
	}
	buf := make([]byte, 100)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, from, err := conn.ReadFrom(buf)
	if err != nil {
		return 5
	}
	if _, err := conn.WriteTo(append(state, buf[:n]...), from); err != nil {
		return 6
	}
	if err := pred.Serving(); err != nil {
		return 7
	}
	return 0
}

func startSuccessor(t *testing.T, mode string) *Successor {
	t.Helper()
	t.Setenv("HANDOVER_TEST_SUCCESSOR", mode)
	s, err := Start(os.Args[0], []string{"-test.run=^$"}, nil, os.Stderr, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Abandon)
	if err := s.WaitReady(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	return s
}

// A socket handed over keeps its address and the datagram waiting in it,
// and the state arrives whole.
func TestHandOverSocketAndState(t *testing.T) {
	server, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	client, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s := startSuccessor(t, "serve")
	// Sent before the hand-over: it waits in the socket.
	if _, err := client.WriteTo([]byte("ping"), server.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	f, err := server.File()
	if err != nil {
		t.Fatal(err)
	}
	state := []byte(strings.Repeat("s", 60000) + ":") // in a memfd: its size is free (but the answer is one datagram)
	if err := s.Send(state, []*os.File{f}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	server.Close() // ours; the successor's descriptor keeps the socket
	if err := s.WaitServing(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, from, err := client.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	if from.String() != server.LocalAddr().String() || string(buf[:n]) != string(state)+"ping" {
		t.Errorf("answer from %v: %d bytes, want %d from %v", from, n, len(state)+4, server.LocalAddr())
	}
}

func TestSuccessorFails(t *testing.T) {
	s := startSuccessor(t, "fail")
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.Send([]byte("{}"), []*os.File{f}); err != nil {
		t.Fatal(err)
	}
	if err := s.WaitServing(10 * time.Second); err == nil || !strings.Contains(err.Error(), "no luck") {
		t.Errorf("WaitServing: %v, want the successor's failure", err)
	}
}
