package signaling

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/pion/sdp/v3"

	"github.com/ebrtc/ebrtc/internal/sfu/secure"
	"github.com/ebrtc/ebrtc/internal/testenv"
)

// The page: a send-only PeerConnection offers (AV1 L1T3), takes the SFU's
// answer; a receive-only one takes the SFU's offer built from the first's
// description and answers it. Results go back by POST.
const acceptancePage = `<html><body><script>
const report = (r) => fetch('/result', {method: 'POST', body: JSON.stringify(r)});
(async () => {
  const r = {};
  try {
    const s = await navigator.mediaDevices.getUserMedia({audio: true, video: {width: 320, height: 180, frameRate: 15}});
    const pub = new RTCPeerConnection();
    for (const t of s.getTracks())
      pub.addTransceiver(t, {direction: 'sendonly', sendEncodings: t.kind === 'video' ? [{scalabilityMode: 'L1T3'}] : undefined});
    const offer = await pub.createOffer();
    await pub.setLocalDescription(offer);
    const answer = await (await fetch('/publish', {method: 'POST', body: offer.sdp})).text();
    try { await pub.setRemoteDescription({type: 'answer', sdp: answer}); r.publish = 'ok'; } catch (e) { r.publish = String(e); }
    const sub = new RTCPeerConnection();
    const remote = await (await fetch('/receiver-offer')).text();
    try {
      await sub.setRemoteDescription({type: 'offer', sdp: remote});
      const a = await sub.createAnswer();
      await sub.setLocalDescription(a);
      r.receiver = 'ok'; r.receiverAnswer = a.sdp;
    } catch (e) { r.receiver = String(e); }
  } catch (e) { r.error = String(e); }
  report(r);
})();
</script></body></html>`

// Chromium accepts the SFU's answer to its send-only offer, and answers a
// receiver offer built from that offer, taking the sender's codecs: as it
// ships (DTLS-SRTP, the SFU's fingerprint, the SFU the DTLS server) and
// with its encryption off (--unencrypted-media).
func TestChromiumAcceptsTheDescriptions(t *testing.T) {
	chromium := testenv.RequireCommand(t, "chromium")
	id, err := secure.NewIdentity()
	if err != nil {
		t.Fatal(err)
	}
	encrypted := sfuICE
	encrypted.Fingerprint = id.Fingerprint()
	t.Run("encrypted", func(t *testing.T) { chromiumAccepts(t, chromium, encrypted) })
	t.Run("plain", func(t *testing.T) { chromiumAccepts(t, chromium, sfuICE, "--disable-webrtc-encryption") })
}

func chromiumAccepts(t *testing.T, chromium string, sfuICE ICE, switches ...string) {
	encrypted := sfuICE.Fingerprint.Value != ""
	results := make(chan map[string]string, 1)
	var pub *Publish
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, acceptancePage) })
	mux.HandleFunc("/publish", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(r.Body, MaxSDPSize+1))
		p, err := ParsePublish(string(b), DefaultCodecs)
		if err != nil {
			t.Errorf("Chromium's offer: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := p.Security.Check(encrypted, true); err != nil {
			t.Errorf("Chromium's offer: %v", err)
		}
		pub = p
		a, err := p.Answer(sfuICE)
		if err != nil {
			t.Error(err)
		}
		io.WriteString(w, a)
	})
	mux.HandleFunc("/receiver-offer", func(w http.ResponseWriter, r *http.Request) {
		if pub == nil {
			http.Error(w, "no publisher", http.StatusConflict)
			return
		}
		o, err := pub.ReceiverOffer(ICE{Ufrag: "sfu1", Pwd: sfuICE.Pwd, Candidates: sfuICE.Candidates, Fingerprint: sfuICE.Fingerprint})
		if err != nil {
			t.Error(err)
		}
		io.WriteString(w, o)
	})
	mux.HandleFunc("/result", func(w http.ResponseWriter, r *http.Request) {
		var res map[string]string
		_ = json.NewDecoder(r.Body).Decode(&res)
		results <- res
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--headless=new", "--no-sandbox", "--disable-gpu", "--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream",
		"--user-data-dir=" + t.TempDir()}, switches...)
	cmd := exec.CommandContext(ctx, chromium, append(args, "http://"+ln.Addr().String()+"/")...)
	testenv.StartGroup(t, cmd)
	var res map[string]string
	select {
	case res = <-results:
	case <-ctx.Done():
		t.Fatal("no result from the page within 60 s")
	}
	if res["error"] != "" || res["publish"] != "ok" || res["receiver"] != "ok" {
		t.Fatalf("page: %v", res)
	}
	var ans sdp.SessionDescription
	if err := ans.UnmarshalString(res["receiverAnswer"]); err != nil {
		t.Fatal(err)
	}
	for i, md := range ans.MediaDescriptions {
		want := itoa(pub.Media[i].PayloadType)
		if pub.Media[i].Kind == "video" {
			want += " " + itoa(pub.Media[i].RTXPayloadType)
		}
		_, recv := md.Attribute("recvonly")
		if md.MediaName.Port.Value == 0 || !recv || strings.Join(md.MediaName.Formats, " ") != want {
			t.Errorf("receiver's answer, section %d: %s port %d formats %v, want payload types %s received", i,
				md.MediaName.Media, md.MediaName.Port.Value, md.MediaName.Formats, want)
		}
	}
	// Chromium takes transport-cc and RTX on its receiving connection.
	r, err := pub.ParseReceiverAnswer(res["receiverAnswer"])
	if err != nil || !r.TWCC || !r.RTX || r.Ufrag == "" {
		t.Errorf("receiver's answer read as %+v, %v; want transport-cc and RTX", r, err)
	}
	if err := r.Security.Check(encrypted, false); err != nil {
		t.Errorf("receiver's answer: %v", err)
	}
	if encrypted != (r.Security.Setup == "active" && len(r.Security.Fingerprints) == 1) {
		t.Errorf("receiver's answer's DTLS: %+v", r.Security)
	}
}
