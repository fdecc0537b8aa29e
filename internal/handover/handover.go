// Package handover passes a running server's state and sockets to its
// successor, a new process of (maybe) a new binary, so an upgrade or a
// restart loses nothing: the old process starts the new one with one end of
// a unix socket pair, sends it the state and the descriptors (SCM_RIGHTS)
// once the new one is ready to take them, and exits when it serves.
package handover

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// EnvFD names the successor's descriptor of the socket pair.
const EnvFD = "EBRTC_HANDOVER_FD"

// Messages on the socket pair (SOCK_SEQPACKET keeps their boundaries).
const (
	msgReady   = "ready"   // successor: started, send the state
	msgFiles   = "files"   // predecessor: a batch of descriptors
	msgState   = "state"   // predecessor: the state (a memfd), the last message
	msgServing = "serving" // successor: serving, the predecessor may go
	msgFailed  = "failed:" // successor: gave up, with why
)

// maxFilesPerMessage stays under the kernel's SCM_MAX_FD (253).
const maxFilesPerMessage = 200

// Successor is the new process, as its predecessor sees it.
type Successor struct {
	cmd     *exec.Cmd
	sock    *os.File
	exited  chan struct{} // closed when it has exited
	exitErr error         // how, once exited is closed
}

// Start runs path with args, stdout and stderr as the successor, holding
// the other end of the socket pair; env adds to this process's environment.
func Start(path string, args, env []string, stdout, stderr io.Writer) (*Successor, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("handover: socketpair: %w", err)
	}
	// Ours non-blocking, for Go's poller; the successor sets its own.
	_ = unix.SetNonblock(fds[0], true)
	ours, theirs := os.NewFile(uintptr(fds[0]), "handover"), os.NewFile(uintptr(fds[1]), "handover-successor")
	defer theirs.Close()
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	cmd.Env = append(append(withoutEnv(os.Environ(), EnvFD), env...), EnvFD+"=3")
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, fmt.Errorf("handover: start %s: %w", path, err)
	}
	s := &Successor{cmd: cmd, sock: ours, exited: make(chan struct{})}
	go func() {
		s.exitErr = cmd.Wait()
		close(s.exited)
	}()
	return s, nil
}

func withoutEnv(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// Pid is the successor's process id.
func (s *Successor) Pid() int { return s.cmd.Process.Pid }

// WaitReady waits until the successor asks for the state.
func (s *Successor) WaitReady(timeout time.Duration) error { return s.await(msgReady, timeout) }

// WaitServing waits until the successor serves on what it was sent.
func (s *Successor) WaitServing(timeout time.Duration) error { return s.await(msgServing, timeout) }

func (s *Successor) await(want string, timeout time.Duration) error {
	got := make(chan error, 1)
	go func() {
		msg, _, err := receive(s.sock)
		switch {
		case err != nil:
			got <- fmt.Errorf("handover: successor: %w", err)
		case strings.HasPrefix(msg, msgFailed):
			got <- fmt.Errorf("handover: successor failed: %s", strings.TrimPrefix(msg, msgFailed))
		case msg != want:
			got <- fmt.Errorf("handover: successor said %q, want %q", msg, want)
		default:
			got <- nil
		}
	}()
	select {
	case err := <-got:
		return err
	case <-s.exited:
		// What it said before it went (a failure, say) is the better news.
		select {
		case err := <-got:
			return err
		case <-time.After(time.Second):
			return fmt.Errorf("handover: successor exited: %v", s.exitErr)
		}
	case <-time.After(timeout):
		return fmt.Errorf("handover: successor not %s after %v", want, timeout)
	}
}

// Send passes the state and the files; the successor refers to the files
// by their index in files.
func (s *Successor) Send(state []byte, files []*os.File) error {
	for len(files) > 0 {
		n := min(len(files), maxFilesPerMessage)
		if err := send(s.sock, msgFiles, files[:n]); err != nil {
			return err
		}
		files = files[n:]
	}
	memfd, err := stateFile(state)
	if err != nil {
		return err
	}
	defer memfd.Close()
	return send(s.sock, msgState, []*os.File{memfd})
}

// Abandon kills a successor that did not take over, and waits until it is
// gone: it must not serve beside its predecessor.
func (s *Successor) Abandon() {
	_ = s.cmd.Process.Kill()
	s.sock.Close()
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
	}
}

// Release lets the successor run on alone.
func (s *Successor) Release() { s.sock.Close() }

// stateFile holds the state in memory: any size, one descriptor.
func stateFile(state []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate("ebrtc-handover-state", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("handover: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "handover-state")
	if _, err := f.Write(state); err != nil {
		f.Close()
		return nil, fmt.Errorf("handover: write state: %w", err)
	}
	return f, nil
}

// Predecessor is the old process, as its successor sees it.
type Predecessor struct{ sock *os.File }

// Inherited is the link to the predecessor when this process was started
// by Start; nil otherwise.
func Inherited() (*Predecessor, error) {
	v := os.Getenv(EnvFD)
	if v == "" {
		return nil, nil
	}
	os.Unsetenv(EnvFD) // not for our own successors
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("handover: %s=%q is not a descriptor", EnvFD, v)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("handover: %s=%d: %w", EnvFD, fd, err)
	}
	return &Predecessor{sock: os.NewFile(uintptr(fd), "handover")}, nil
}

// Receive asks for the state and returns it with the files sent along.
func (p *Predecessor) Receive(timeout time.Duration) ([]byte, []*os.File, error) {
	if err := send(p.sock, msgReady, nil); err != nil {
		return nil, nil, err
	}
	_ = p.sock.SetReadDeadline(time.Now().Add(timeout))
	var files []*os.File
	for {
		msg, got, err := receive(p.sock)
		if err != nil {
			closeAll(files)
			return nil, nil, fmt.Errorf("handover: predecessor: %w", err)
		}
		switch msg {
		case msgFiles:
			files = append(files, got...)
		case msgState:
			if len(got) != 1 {
				closeAll(append(files, got...))
				return nil, nil, errors.New("handover: state without its file")
			}
			state, err := readState(got[0])
			if err != nil {
				closeAll(files)
				return nil, nil, err
			}
			return state, files, nil
		default:
			closeAll(append(files, got...))
			return nil, nil, fmt.Errorf("handover: unexpected message %q", msg)
		}
	}
}

func readState(f *os.File) ([]byte, error) {
	defer f.Close()
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("handover: read state: %w", err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("handover: read state: %w", err)
	}
	return b, nil
}

// Serving tells the predecessor to go.
func (p *Predecessor) Serving() error {
	defer p.sock.Close()
	return send(p.sock, msgServing, nil)
}

// Failed tells the predecessor to go on serving itself.
func (p *Predecessor) Failed(why error) {
	_ = send(p.sock, msgFailed+why.Error(), nil)
	p.sock.Close()
}

func send(sock *os.File, msg string, files []*os.File) error {
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fd, err := rawFD(f)
			if err != nil {
				return fmt.Errorf("handover: send %s: %w", msg, err)
			}
			fds[i] = fd
		}
		oob = unix.UnixRights(fds...)
	}
	rc, err := sock.SyscallConn()
	if err != nil {
		return err
	}
	var sendErr error
	err = rc.Write(func(fd uintptr) bool {
		sendErr = unix.Sendmsg(int(fd), []byte(msg), oob, nil, 0)
		return sendErr != unix.EAGAIN
	})
	if err == nil {
		err = sendErr
	}
	if err != nil {
		return fmt.Errorf("handover: send %s: %w", msg, err)
	}
	return nil
}

// rawFD is f's descriptor. Unlike f.Fd, it leaves the file's blocking mode
// alone: a socket's description is shared with the server still using it.
func rawFD(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	var out int
	err = rc.Control(func(fd uintptr) { out = int(fd) })
	return out, err
}

func receive(sock *os.File) (string, []*os.File, error) {
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4*maxFilesPerMessage))
	rc, err := sock.SyscallConn()
	if err != nil {
		return "", nil, err
	}
	var n, oobn, flags int
	var recvErr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, flags, _, recvErr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return recvErr != unix.EAGAIN
	})
	if err == nil {
		err = recvErr
	}
	if err != nil {
		return "", nil, err
	}
	if n == 0 && oobn == 0 {
		return "", nil, io.EOF
	}
	files, err := parseRights(oob[:oobn])
	if err == nil && flags&(unix.MSG_CTRUNC|unix.MSG_TRUNC) != 0 {
		// Descriptors dropped (out of them?): the rest would be taken
		// for others'.
		closeAll(files)
		return "", nil, errors.New("handover: message or descriptors truncated")
	}
	return string(buf[:n]), files, err
}

func parseRights(oob []byte) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("handover: control message: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "handover-file"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
