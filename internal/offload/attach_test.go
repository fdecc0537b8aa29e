package offload

import (
	"strings"
	"testing"

	"github.com/ebrtc/ebrtc/internal/testenv"
)

// Auto puts XDP where XDP frames are delivered (a veth whose peer runs XDP)
// and TC everywhere; an unknown mode is refused. The programs learn the
// choice through the interface table.
func TestAutoModeFollowsTheVethPeer(t *testing.T) {
	r := newRig(t)
	testenv.Must(t, r.ns.Do(func() error {
		pass, err := AttachPass("cli1")
		if err != nil {
			return err
		}
		defer pass.Close()
		withXDP, err := r.engine.Attach("cli0", ModeAuto, true)
		if err != nil {
			return err
		}
		if withXDP.Hooks() != "xdp+tc" || !withXDP.XDPEgress || !strings.Contains(withXDP.Reason, "peer runs XDP") {
			t.Errorf("veth whose peer runs XDP: %+v", withXDP)
		}
		without, err := r.engine.Attach("peer0", ModeAuto, true)
		if err != nil {
			return err
		}
		if without.Hooks() != "tc" || without.XDPEgress || !strings.Contains(without.Reason, "runs no XDP") {
			t.Errorf("veth whose peer runs no XDP: %+v", without)
		}
		forced, err := r.engine.Attach("far0", ModeTC, true)
		if err != nil {
			return err
		}
		if forced.Hooks() != "tc" {
			t.Errorf("forced tc: %+v", forced)
		}
		if _, err := r.engine.Attach("far1", Mode("generic"), true); err == nil {
			t.Error("an unknown mode was accepted")
		}
		for _, a := range []Attachment{withXDP, without, forced} {
			var info turnIfaceInfo
			if err := r.engine.objs.Ifaces.Lookup(uint32(a.Index), &info); err != nil {
				return err
			}
			want := uint32(ifaceRegistered | ifaceTC)
			if a.XDP {
				want |= ifaceXDP | ifaceXDPEgress
			}
			if info.Flags != want || info.Mac != [6]byte(r.ifs[a.Iface].mac) {
				t.Errorf("%s: interface table %+v, want flags %#x and its MAC", a.Iface, info, want)
			}
		}
		if got := len(r.engine.Attachments()); got != 3 {
			t.Errorf("%d attachments listed, want 3", got)
		}
		return nil
	}))
}
