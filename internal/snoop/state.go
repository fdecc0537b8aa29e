package snoop

import (
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/ebrtc/ebrtc/internal/offload"
)

// The learner's state is written to a file on every change, so a restarted
// `ebrtc offload` knows the lifetimes of the channels its pinned maps kept.

type savedState struct {
	Allocations []savedAllocation `json:"allocations"`
}

type savedAllocation struct {
	Client   netip.AddrPort `json:"client"`
	Server   netip.AddrPort `json:"server"`
	Relay    netip.AddrPort `json:"relay"`
	Expires  time.Time      `json:"expires"`
	Channels []savedChannel `json:"channels"`
}

type savedChannel struct {
	Number  uint16         `json:"number"`
	Peer    netip.AddrPort `json:"peer"`
	Expires time.Time      `json:"expires"`
}

// persist writes the state atomically; called with l.mu held.
func (l *Learner) persist() {
	if l.statePath == "" {
		return
	}
	var st savedState
	for t, a := range l.allocations {
		sa := savedAllocation{Client: t.client, Server: t.server, Relay: a.relay, Expires: a.expires}
		for n, c := range a.channels {
			sa.Channels = append(sa.Channels, savedChannel{Number: n, Peer: c.ch.Peer, Expires: c.expires})
		}
		st.Allocations = append(st.Allocations, sa)
	}
	b, err := json.Marshal(st)
	if err == nil {
		tmp := l.statePath + ".tmp"
		if err = os.WriteFile(tmp, b, 0o600); err == nil {
			err = os.Rename(tmp, l.statePath)
		}
	}
	if err != nil {
		l.log("snoop: save state: %v", err)
	}
}

// Restore reads the state file and reconciles it with the channels the fast
// path kept (installed): a channel both know is taken over with its lifetime;
// one only the maps hold has no known lifetime and is removed; one only the
// file knows (the pins were gone) is forgotten, to be learned again at its
// client's next ChannelBind.
func (l *Learner) Restore(statePath string, installed []offload.Channel) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.statePath = statePath
	var st savedState
	b, err := os.ReadFile(statePath)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(b, &st); err != nil {
			l.log("snoop: state file %s unreadable, starting empty: %v", statePath, err)
			st = savedState{}
		}
	}
	inMaps := map[offload.Channel]bool{}
	for _, ch := range installed {
		inMaps[ch] = true
	}
	for _, sa := range st.Allocations {
		t := fiveTuple{client: sa.Client, server: sa.Server}
		if l.allocations[t] != nil {
			continue // a corrupt file repeats a 5-tuple: the first counts, the rest's channels go
		}
		a := &allocation{relay: sa.Relay, expires: sa.Expires, channels: map[uint16]*channel{}}
		for _, sc := range sa.Channels {
			ch := offload.Channel{Client: sa.Client, Server: sa.Server, Relay: sa.Relay, Peer: sc.Peer, Number: sc.Number}
			if inMaps[ch] && a.channels[sc.Number] == nil {
				a.channels[sc.Number] = &channel{ch: ch, expires: sc.Expires}
				delete(inMaps, ch)
			}
		}
		l.allocations[t] = a
	}
	for ch := range inMaps {
		l.remove(ch)
	}
	if err := os.MkdirAll(filepath.Dir(statePath), 0o755); err != nil {
		return err
	}
	l.persist()
	return nil
}
