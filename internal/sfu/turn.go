package sfu

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ebrtc/ebrtc/internal/sfu/controller"
	"github.com/ebrtc/ebrtc/internal/turnrest"
)

// TURN is the TURN servers participants are handed (Config.TURN): each
// joining participant gets credentials of its own (the TURN REST API's,
// package turnrest), valid for TTL, which the servers check with the
// secret they share with the SFU (ebrtc turn --auth-secret, coturn's
// static-auth-secret).
type TURN struct {
	URLs   []string      // turn: or turns: URLs (RFC 7065), e.g. turn:turn.example.com:3478?transport=tcp
	Secret []byte        // the TURN REST API secret
	TTL    time.Duration // 0: 12 hours
}

func (t *TURN) validate() error {
	if len(t.URLs) == 0 {
		return nil
	}
	if len(t.Secret) == 0 {
		return errors.New("sfu: turn-url: needs the TURN REST secret (--turn-secret-file)")
	}
	for _, u := range t.URLs {
		scheme, rest, _ := strings.Cut(u, ":")
		if (scheme != "turn" && scheme != "turns") || rest == "" || strings.ContainsAny(u, " \"\n\r") {
			return fmt.Errorf("sfu: turn-url %q: want turn:HOST[:PORT][?transport=udp|tcp] or turns:HOST[:PORT][?transport=tcp]", u)
		}
	}
	if t.TTL == 0 {
		t.TTL = 12 * time.Hour
	}
	if t.TTL < time.Minute || t.TTL > 48*time.Hour {
		return fmt.Errorf("sfu: turn-ttl %v: want 1m to 48h", t.TTL)
	}
	return nil
}

// servers are the TURN servers with credentials for user (none without
// URLs).
func (t TURN) servers(user string, now time.Time) []controller.ICEServer {
	if len(t.URLs) == 0 {
		return nil
	}
	name, pass := turnrest.Mint(string(t.Secret), user, now, t.TTL)
	return []controller.ICEServer{{URLs: t.URLs, Username: name, Credential: pass}}
}
