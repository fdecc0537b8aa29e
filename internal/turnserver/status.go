package turnserver

import (
	"cmp"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/ebrtc/ebrtc/internal/admin"
	"github.com/ebrtc/ebrtc/internal/offload"
)

// What the admin endpoint (ebrtc top) and the per-user metrics show: each
// allocation's traffic on both paths, and each user's, kept monotonic over
// the allocations that ended (counters must not fall when one does).

// allocTraffic is an allocation's traffic: the slow path's as its relay
// socket counts it, and the fast path's of channels already removed (the
// live channels' is read from the BPF counters).
type allocTraffic struct {
	slow slowStats

	mu          sync.Mutex
	retiredFast admin.Flow
}

func (t *allocTraffic) retireFast(f admin.Flow) {
	t.mu.Lock()
	t.retiredFast = t.retiredFast.Add(f)
	t.mu.Unlock()
}

func (t *allocTraffic) slowFlow() admin.Flow {
	load := func(c *counter) admin.Counter { return admin.Counter{Packets: c.packets.Load(), Bytes: c.bytes.Load()} }
	return admin.Flow{ToPeer: load(&t.slow.toPeer), ToClient: load(&t.slow.toClient)}
}

func (t *allocTraffic) fastRetired() admin.Flow {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.retiredFast
}

// total is the traffic of an allocation whose channels are all removed.
func (t *allocTraffic) total() (fast, slow admin.Flow) { return t.fastRetired(), t.slowFlow() }

// restore carries a predecessor's counts on (a restart is no reset).
func (t *allocTraffic) restore(slow, retiredFast admin.Flow) {
	t.slow.toPeer.packets.Store(slow.ToPeer.Packets)
	t.slow.toPeer.bytes.Store(slow.ToPeer.Bytes)
	t.slow.toClient.packets.Store(slow.ToClient.Packets)
	t.slow.toClient.bytes.Store(slow.ToClient.Bytes)
	t.retireFast(retiredFast)
}

// userTraffic is what ended allocations relayed, per user. A user with no
// allocation for retention is forgotten (its series ends): per-session
// REST user ids must not grow the table for ever.
type userTraffic struct {
	mu      sync.Mutex
	retired map[string]*retiredUser
}

type retiredUser struct {
	admin.User
	at time.Time // last retired
}

const userRetention = time.Hour

func (u *userTraffic) retire(user string, fast, slow admin.Flow) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.retired == nil {
		u.retired = map[string]*retiredUser{}
	}
	r := u.retired[user]
	if r == nil {
		r = &retiredUser{User: admin.User{Name: user}}
		u.retired[user] = r
	}
	r.Fast, r.Slow, r.at = r.Fast.Add(fast), r.Slow.Add(slow), time.Now()
}

// restore takes a predecessor's table over.
func (u *userTraffic) restore(users map[string]admin.User) {
	for name, r := range users {
		u.retire(name, r.Fast, r.Slow)
	}
}

// snapshot returns the table, first forgetting users idle for retention
// that hold no allocation (not in live; nil: forget none).
func (u *userTraffic) snapshot(live map[string]bool) map[string]admin.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make(map[string]admin.User, len(u.retired))
	for name, r := range u.retired {
		if live != nil && !live[name] && time.Since(r.at) > userRetention {
			delete(u.retired, name)
			continue
		}
		out[name] = r.User
	}
	return out
}

// retireChannel keeps what the fast path relayed on a channel that leaves
// it with its allocation's traffic.
func (srv *Server) retireChannel(ch offload.Channel, toPeer, toClient offload.FlowStats) {
	if rc := srv.gen.live.conn(ch.Relay); rc != nil {
		rc.traffic.retireFast(admin.FlowOf(toPeer, toClient))
	}
}

// Status is the server's snapshot for the admin endpoint.
func (srv *Server) Status() admin.Status {
	st := admin.Status{Server: "turn", Pid: os.Getpid(), Time: time.Now()}
	toPeer, toClient := srv.slowCounters()
	st.Slow = flowOf(toPeer, toClient)
	if srv.engine != nil {
		admin.FastPath(srv.engine, &st)
	}
	st.Allocations = srv.allocationStatus()
	live := map[string]bool{}
	for _, a := range st.Allocations {
		live[a.User] = true
	}
	st.Users = usersOf(st.Allocations, srv.gen.users.snapshot(live))
	return st
}

func flowOf(toPeer, toClient offload.Counter) admin.Flow {
	return admin.Flow{ToPeer: admin.Counter(toPeer), ToClient: admin.Counter(toClient)}
}

func (srv *Server) allocationStatus() []admin.Allocation {
	if srv.turn == nil {
		return nil
	}
	var out []admin.Allocation
	for _, a := range srv.turn.ExportAllocations() {
		rc, ok := a.RelayConn.(*relayConn)
		if !ok {
			continue
		}
		al := admin.Allocation{Client: addrPort(a.ClientAddr), Relay: rc.addr, User: a.Username, Expires: a.Expires,
			Fast: rc.traffic.fastRetired(), Slow: rc.traffic.slowFlow()}
		offloaded := srv.table.channelsOf(allocKey{addrPort(a.ClientAddr), addrPort(a.ServerAddr)})
		for _, c := range a.Channels {
			ac := admin.Channel{Number: c.Number, Peer: addrPort(c.Peer)}
			if ch, ok := offloaded[c.Number]; ok && srv.engine != nil {
				if toPeer, toClient, err := srv.engine.ChannelStats(ch); err == nil {
					ac.Offload = true
					ac.Fast = admin.FlowOf(toPeer, toClient)
					al.Fast = al.Fast.Add(ac.Fast)
				}
			}
			al.Channels = append(al.Channels, ac)
		}
		out = append(out, al)
	}
	slices.SortFunc(out, func(a, b admin.Allocation) int {
		return cmp.Or(cmp.Compare(a.User, b.User), a.Client.Compare(b.Client))
	})
	return out
}

// usersOf sums the live allocations per user, on top of what the user's
// ended allocations relayed.
func usersOf(allocs []admin.Allocation, retired map[string]admin.User) []admin.User {
	users := retired
	for _, a := range allocs {
		u := users[a.User]
		u.Name = a.User
		u.Allocations++
		u.Fast, u.Slow = u.Fast.Add(a.Fast), u.Slow.Add(a.Slow)
		users[a.User] = u
	}
	out := make([]admin.User, 0, len(users))
	for _, u := range users {
		out = append(out, u)
	}
	slices.SortFunc(out, func(a, b admin.User) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// channelsOf are an allocation's channels in the fast path, by number.
func (t *channelTable) channelsOf(key allocKey) map[uint16]offload.Channel {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.allocations[key]
	if st == nil {
		return nil
	}
	out := map[uint16]offload.Channel{}
	for n, ch := range st.channels {
		if t.permitted(st, ch) {
			out[n] = ch
		}
	}
	return out
}
