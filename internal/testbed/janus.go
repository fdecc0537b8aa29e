package testbed

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// JanusAPI is where Janus, started by StartJanus, serves its HTTP API
// (the path /janus): where `ebrtc sfu` serves its signaling.
var JanusAPI = SFUWeb

// janusConfig is janus.jcfg for the testbed: plain RTP (the like for like
// with `ebrtc sfu --unencrypted-media`) or Janus's default DTLS-SRTP (its
// own self-signed certificate made at start), ICE-lite with host
// candidates on the client-side interface only, IPv4, and nothing loaded
// but the VideoRoom plugin and the HTTP transport.
const janusConfig = `general: {
	configs_folder = "%[1]s"
	interface = "%[3]s"
	plugins_folder = "%[4]s/plugins"
	transports_folder = "%[4]s/transports"
	events_folder = "%[4]s/events"
	loggers_folder = "%[4]s/loggers"
	log_to_stdout = true
	debug_level = 3
	session_timeout = 120
	protected_folders = []
	no_webrtc_encryption = %[5]t
}
media: {
	ipv6 = false
	rtp_port_range = "20000-39999"
	nack_optimizations = true
}
nat: {
	ice_lite = true
	ice_tcp = false
	full_trickle = false
	ice_enforce_list = "%[2]s"
	ignore_mdns = true
}
plugins: {
	disable = "libjanus_audiobridge.so,libjanus_duktape.so,libjanus_echotest.so,libjanus_lua.so,libjanus_nosip.so,libjanus_recordplay.so,libjanus_sip.so,libjanus_streaming.so,libjanus_textroom.so,libjanus_videocall.so,libjanus_voicemail.so"
}
transports: {
	disable = "libjanus_mqtt.so,libjanus_nanomsg.so,libjanus_pfunix.so,libjanus_rabbitmq.so,libjanus_websockets.so"
}
events: {
	broadcast = false
}
loggers: {
	disable = "libjanus_jsonlog.so"
}
`

const janusHTTPConfig = `general: {
	json = "plain"
	base_path = "/janus"
	http = true
	port = %d
	interface = "%s"
	https = false
}
admin: {
	admin_http = false
}
`

// String ids: rooms are named as with ebrtc sfu.
const janusVideoRoomConfig = `general: {
	string_ids = true
}
`

// StartJanus runs Debian's Janus (VideoRoom, HTTP API at JanusAPI) in the
// server namespace with its configuration in workDir, and returns once the
// API answers; encrypted, with its DTLS-SRTP on (its default), else plain
// RTP. Rooms are created through the API.
func (tb *Testbed) StartJanus(workDir string, out io.Writer, encrypted bool) (*Process, error) {
	// Debian's multiarch directory: /usr/lib/<triplet>/janus.
	libs, _ := filepath.Glob("/usr/lib/*/janus/plugins/libjanus_videoroom.so")
	if _, err := os.Stat("/usr/bin/janus"); err != nil || len(libs) == 0 {
		return nil, fmt.Errorf("janus is not installed (apt-get install janus): %v", err)
	}
	libDir := filepath.Dir(filepath.Dir(libs[0]))
	files := map[string]string{
		"janus.jcfg":                  fmt.Sprintf(janusConfig, workDir, ServerCliIface, ServerClientIP4, libDir, !encrypted),
		"janus.transport.http.jcfg":   fmt.Sprintf(janusHTTPConfig, JanusAPI.Port(), ServerCliIface),
		"janus.plugin.videoroom.jcfg": janusVideoRoomConfig,
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(workDir, name), []byte(text), 0o600); err != nil {
			return nil, err
		}
	}
	p, err := Start(tb.Server, out, "janus", "--configs-folder", workDir, "--config", filepath.Join(workDir, "janus.jcfg"),
		"--disable-colors")
	if err != nil {
		return nil, err
	}
	url := "http://" + JanusAPI.String() + "/janus/info"
	client := http.Client{Timeout: time.Second, Transport: &http.Transport{DialContext: DialContextIn(tb.Server)}}
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if exited, err := p.Exited(); exited {
			return nil, fmt.Errorf("janus exited: %v", err)
		}
		resp, err := client.Get(url)
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK && strings.Contains(string(body), "janus.plugin.videoroom") {
			return p, nil
		}
	}
	_ = p.Stop(5 * time.Second)
	return nil, fmt.Errorf("janus API not answering at %s after 15 s", url)
}
