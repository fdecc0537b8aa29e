// Two RTCPeerConnections in headless Chromium, both relay-only through one
// TURN server, exchange a fake-camera video track and a data channel.
// Prints one JSON line with what the receiving side saw.
//
// usage: node relay_call.mjs TURN_URL USERNAME PASSWORD SECONDS
import http from 'node:http';
import { launchChromium } from './chromium.mjs';

const [turnUrl, username, credential, secondsArg] = process.argv.slice(2);
if (!turnUrl || !username || !credential) {
  console.error('usage: node relay_call.mjs TURN_URL USERNAME PASSWORD [SECONDS]');
  process.exit(2);
}
const seconds = Number(secondsArg || 8);

const page = `<!doctype html><meta charset="utf-8"><title>ebrtc relay call</title>
<video id="remote" autoplay muted playsinline></video>
<script>
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function waitFor(what, cond, ms) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await sleep(50);
  }
}
async function selectedPair(pc) {
  const stats = await pc.getStats();
  for (const r of stats.values()) {
    if (r.type === 'transport' && r.selectedCandidatePairId) {
      const pair = stats.get(r.selectedCandidatePairId);
      return { local: stats.get(pair.localCandidateId)?.candidateType, remote: stats.get(pair.remoteCandidateId)?.candidateType };
    }
  }
  return {};
}
window.relayCall = async ({ turnUrl, username, credential, seconds }) => {
  const config = { iceServers: [{ urls: turnUrl, username, credential }], iceTransportPolicy: 'relay' };
  const caller = new RTCPeerConnection(config);
  const callee = new RTCPeerConnection(config);
  const candidates = { caller: [], callee: [] };
  caller.onicecandidate = (e) => { if (e.candidate) { candidates.caller.push(e.candidate.candidate); callee.addIceCandidate(e.candidate); } };
  callee.onicecandidate = (e) => { if (e.candidate) { candidates.callee.push(e.candidate.candidate); caller.addIceCandidate(e.candidate); } };

  const camera = await navigator.mediaDevices.getUserMedia({ video: { width: 640, height: 480, frameRate: 30 }, audio: false });
  camera.getTracks().forEach((t) => caller.addTrack(t, camera));
  const channel = caller.createDataChannel('chat');
  let received = 0;
  callee.ondatachannel = (e) => { e.channel.onmessage = () => { received++; }; };
  const video = document.getElementById('remote');
  callee.ontrack = (e) => { video.srcObject = e.streams[0]; };

  await caller.setLocalDescription(await caller.createOffer());
  await callee.setRemoteDescription(caller.localDescription);
  await callee.setLocalDescription(await callee.createAnswer());
  await caller.setRemoteDescription(callee.localDescription);
  await waitFor('connection', () => caller.connectionState === 'connected' && callee.connectionState === 'connected', 20000);
  await waitFor('data channel', () => channel.readyState === 'open', 10000);

  let sent = 0;
  const timer = setInterval(() => { channel.send('message ' + sent); sent++; }, 20);
  await sleep(seconds * 1000);
  clearInterval(timer);
  await sleep(1000);

  let inbound = {};
  for (const r of (await callee.getStats()).values()) {
    if (r.type === 'inbound-rtp' && r.kind === 'video') inbound = r;
  }
  const result = {
    framesDecoded: inbound.framesDecoded || 0,
    bytesReceived: inbound.bytesReceived || 0,
    videoWidth: video.videoWidth,
    messagesSent: sent,
    messagesReceived: received,
    callerPair: await selectedPair(caller),
    calleePair: await selectedPair(callee),
    candidates,
  };
  caller.close();
  callee.close();
  return result;
};
</script>`;

const server = http.createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'text/html' });
  res.end(page);
});
await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
const url = `http://127.0.0.1:${server.address().port}/`;

const browser = await launchChromium();
let exitCode = 0;
try {
  const tab = await browser.newPage();
  await tab.goto(url);
  const result = await tab.evaluate((cfg) => window.relayCall(cfg), { turnUrl, username, credential, seconds });
  console.log(JSON.stringify(result));
} catch (err) {
  console.error(String(err && err.stack || err));
  exitCode = 1;
} finally {
  await browser.close();
  server.close();
}
process.exit(exitCode);
