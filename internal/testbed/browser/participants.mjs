// Some participants of one ebrtc sfu room, in one headless Chromium (each
// in its own browser context, encryption off as the SFU needs): the others
// join from another process, possibly in another network namespace. Each
// ROLE is `send` (publishes the fake camera and microphone, as the meeting
// page does: AV1 L1T3 at 320x180, and receives everyone) or `recv` (only
// receives). The page always opens its camera and offers to publish; for a
// `recv` participant this script drops the page's `publish` message, so the
// SFU never answers it and the participant only gets the receive-only
// connections it offers (the page itself is unchanged).
//
// Every INTERVAL_MS it prints one JSON line:
//   {t: ms since the epoch, samples: n, pages: [page...]}
// page: {role, id, status, inbound: {publisherId: {video: {...}, audio: {...}}},
//        outbound: {video: {...}, audio: {...}}, pub: {availableOutgoingBitrate, rtt}}
// with the cumulative counters of getStats() (framesDecoded, freezeCount,
// nackCount, packetsLost, packetsReceived, ...) and Chromium's framesPerSecond;
// rates are for the reader to take from counter deltas. It stops after
// SECONDS, or earlier when a line `stop` arrives on standard input, and
// prints a last line {summary: {...}}: the last sample, and per page the
// feedback (rtcp-fb) and header extensions negotiated. A line
// `mode PAGE MODE` on standard input sets page PAGE's (its index here)
// video encoding's scalabilityMode (setParameters), as an app switching
// its encoder does; a line `camera PAGE on|off` clicks its camera button
// as its user does. Each page's sample says which senders' video the SFU
// paused for it (`paused`: the page's own record of the SFU's notices).
//
// usage: node participants.mjs 'URL...' ROLES SECONDS [INTERVAL_MS]
//   e.g. node participants.mjs 'http://10.201.1.1:8088/?token=A http://10.201.1.1:8088/?token=B' send,send 60 1000
import { launchChromium, contextOptions, open } from './chromium.mjs';
import { launchFirefox } from './firefox.mjs';
import { createInterface } from 'node:readline';

const [urlArg, rolesArg, secondsArg, intervalArg] = process.argv.slice(2);
if (!urlArg || !rolesArg) {
  console.error('usage: node participants.mjs URL ROLES SECONDS [INTERVAL_MS]');
  process.exit(2);
}
// URL is one address for every page (open rooms) or, space-separated, one
// per page (each with its own join token).
const urls = urlArg.split(/\s+/).filter((u) => u);
const urlFor = (i) => urls[Math.min(i, urls.length - 1)];
const roles = rolesArg.split(',');
if (!roles.every((r) => r === 'send' || r === 'recv')) {
  console.error('roles: a comma-separated list of send and recv');
  process.exit(2);
}
const seconds = Number(secondsArg || 30), interval = Number(intervalArg || 1000);

let stopping = false;
let wake = () => {};
const commands = [];
createInterface({ input: process.stdin }).on('line', (l) => {
  const f = l.trim().split(/\s+/);
  if (f[0] === 'stop') { stopping = true; wake(); }
  if (f[0] === 'mode' && f.length === 3) commands.push({ page: Number(f[1]), mode: f[2] });
  if (f[0] === 'camera' && f.length === 3) commands.push({ page: Number(f[1]), camera: f[2] === 'on' });
});

// Runs in the page: sets its video encoding's scalability mode.
async function setMode(mode) {
  const sender = window.meeting.pub.getSenders().find((s) => s.track && s.track.kind === 'video');
  const params = sender.getParameters();
  params.encodings[0].scalabilityMode = mode;
  await sender.setParameters(params);
  return sender.getParameters().encodings[0].scalabilityMode;
}
// Turns a page's camera on or off with its button, as its user does; the
// button's label after (its label names what a click does).
async function cameraTo(page, on) {
  const label = () => page.evaluate(() => document.getElementById('camBtn').textContent);
  if (((await label()) === 'Camera off') !== on) await page.click('#camBtn');
  for (let i = 0; i < 50 && ((await label()) === 'Camera off') !== on; i++) await new Promise((r) => setTimeout(r, 100));
  return label();
}
const sleep = (ms) => new Promise((r) => { const t = setTimeout(r, ms); wake = () => { clearTimeout(t); r(); }; });

// Runs in the page: the stats of its connections (window.meeting: pub, the
// send-only connection; subs, the receive-only ones by publisher id).
async function collect() {
  const st = window.meeting;
  const pick = (r, keys) => Object.fromEntries(keys.filter((k) => r[k] !== undefined).map((k) => [k, r[k]]));
  const inKeys = ['packetsReceived', 'packetsLost', 'bytesReceived', 'framesDecoded', 'framesDropped',
    'framesReceived', 'keyFramesDecoded', 'framesPerSecond', 'freezeCount', 'totalFreezesDuration',
    'pauseCount', 'totalPausesDuration', 'nackCount', 'pliCount', 'firCount', 'jitter',
    'jitterBufferDelay', 'jitterBufferEmittedCount', 'frameWidth', 'frameHeight', 'ssrc'];
  const outKeys = ['packetsSent', 'bytesSent', 'retransmittedPacketsSent', 'framesEncoded', 'framesSent',
    'keyFramesEncoded', 'framesPerSecond', 'targetBitrate', 'scalabilityMode', 'qualityLimitationReason',
    'qualityLimitationDurations', 'nackCount', 'pliCount', 'firCount', 'frameWidth', 'frameHeight',
    'encoderImplementation', 'ssrc'];
  const connStats = (report) => {
    let pair;
    report.forEach((r) => { if (r.type === 'candidate-pair' && r.nominated && r.state === 'succeeded') pair = r; });
    return pair ? pick(pair, ['availableOutgoingBitrate', 'availableIncomingBitrate', 'currentRoundTripTime']) : {};
  };
  const inbound = {};
  for (const [id, pc] of st.subs) {
    const report = await pc.getStats();
    const s = { conn: connStats(report) };
    report.forEach((r) => {
      if (r.type !== 'inbound-rtp') return;
      const codec = r.codecId && report.get(r.codecId);
      s[r.kind] = { ...pick(r, inKeys), codec: codec ? codec.mimeType : '' };
    });
    inbound[id] = s;
  }
  const outbound = {};
  let pub = {};
  if (st.pub && st.pub.remoteDescription) {
    const report = await st.pub.getStats();
    pub = connStats(report);
    report.forEach((r) => {
      // (Simulcast: the largest encoding's, and how many are sent.)
      if (r.type === 'outbound-rtp') {
        const o = pick(r, outKeys), have = outbound[r.kind];
        o.encodings = ((have && have.encodings) || 0) + (r.rid || !have ? 1 : 0);
        o.encodingWidths = `${(have && have.encodingWidths) || ''}${r.rid || '-'}:${r.frameWidth || 0}${r.active === false ? '(off)' : ''} `;
        if (!have || (o.frameWidth || 0) > (have.frameWidth || 0)) outbound[r.kind] = { ...o, remote: have && have.remote };
        else { have.encodings = o.encodings; have.encodingWidths = o.encodingWidths; }
      }
      if (r.type === 'remote-inbound-rtp') {
        const o = outbound[r.kind] || (outbound[r.kind] = {});
        o.remote = pick(r, ['packetsLost', 'fractionLost', 'roundTripTime', 'jitter']);
      }
    });
    // (What the camera track was opened at: the constraints' choice of its formats.)
    const vs = st.pub.getSenders().find((x) => x.track && x.track.kind === 'video');
    if (vs && outbound.video) outbound.video.trackWidth = vs.track.getSettings().width;
  }
  const status = document.getElementById('status').textContent;
  return { id: st.id || '', status, inbound, outbound, pub, paused: { ...st.paused } };
}

// Runs in the page: what feedback and header extensions were negotiated
// (the SFU's answer to our publication, and its offers to us).
function negotiated() {
  const st = window.meeting;
  const lines = (sdp) => (sdp || '').split(/\r?\n/).filter((l) => /^a=(rtcp-fb|extmap):/.test(l));
  const subs = {};
  for (const [id, pc] of st.subs) subs[id] = { offer: lines(pc.remoteDescription && pc.remoteDescription.sdp),
    answer: lines(pc.localDescription && pc.localDescription.sdp) };
  return { pubAnswer: lines(st.pub && st.pub.remoteDescription && st.pub.remoteDescription.sdp), subs };
}

// How the process ends, said even where nothing else is (an exit from
// deep inside a library, a signal turned into an exit).
process.on('exit', (c) => console.error('participants.mjs: exit', c));
process.on('unhandledRejection', (e) => console.error('participants.mjs: unhandled rejection:', (e && e.stack) || String(e)));
// BROWSERS (env), comma-separated per page: chromium (the default),
// chromium-apart (a Chromium of its own, as on a machine of its own: the
// pages of one Chromium share its fake camera, which runs at the size the
// first page to open it asked for, so a page asking for another size gets
// that one; which page is first is a race) or firefox (Firefox ESR over
// WebDriver BiDi, a `send` page only).
const kinds = (process.env.BROWSERS || '').split(',');
const browser = await launchChromium(new URL(urlFor(0)).origin);
const apart = [];
let firefox = null;
let code = 0;
try {
  const pages = [];
  for (const [i, role] of roles.entries()) {
    if (kinds[i] === 'firefox') {
      if (role !== 'send') throw new Error('a firefox page sends');
      firefox ||= await launchFirefox();
      const page = await (await firefox.createBrowserContext()).newPage();
      page.on('pageerror', (e) => console.error('page', i, e));
      page.on('console', (m) => console.error('console', i, m.text()));
      await page.goto(urlFor(i));
      pages.push({ role, page });
      continue;
    }
    let own = browser;
    if (kinds[i] === 'chromium-apart') apart.push(own = await launchChromium(new URL(urlFor(0)).origin));
    const ctx = await own.newContext(contextOptions(urlFor(0)));
    if (role === 'recv') {
      // Join without publishing: the page's publish message never leaves.
      await ctx.addInitScript(() => {
        const send = WebSocket.prototype.send;
        WebSocket.prototype.send = function (data) {
          try { if (JSON.parse(data).type === 'publish') return; } catch (e) { /* not ours */ }
          return send.call(this, data);
        };
      });
    }
    const page = await ctx.newPage();
    page.on('pageerror', (e) => console.error('page', i, e));
    page.on('console', (m) => console.error('console', i, m.text()));
    await open(page, urlFor(i));
    pages.push({ role, page });
  }
  const start = Date.now();
  let samples = 0, last = null;
  // What each page negotiated, kept as connections come (and go, when the
  // other process's participants leave first).
  const sdp = pages.map(() => ({ pubAnswer: [], subs: {} }));
  while (!stopping && Date.now() - start < seconds * 1000) {
    while (commands.length) {
      const c = commands.shift();
      if (c.camera !== undefined) {
        console.error('page', c.page, 'camera', await cameraTo(pages[c.page].page, c.camera));
        continue;
      }
      const got = await pages[c.page].page.evaluate(setMode, c.mode);
      console.error('page', c.page, 'scalabilityMode', got);
    }
    const t = Date.now();
    const out = [];
    for (const [i, { role, page }] of pages.entries()) {
      out.push({ role, ...(await page.evaluate(collect)) });
      const n = await page.evaluate(negotiated);
      if (n.pubAnswer.length) sdp[i].pubAnswer = n.pubAnswer;
      Object.assign(sdp[i].subs, n.subs);
    }
    samples++;
    last = { t, samples, pages: out };
    console.log(JSON.stringify(last));
    await sleep(Math.max(0, t + interval - Date.now()));
  }
  console.log(JSON.stringify({ summary: { elapsedMs: Date.now() - start, samples, last, negotiated: sdp } }));
} catch (e) {
  console.error('participants.mjs:', (e && e.stack) || String(e));
  code = 1;
} finally {
  if (firefox) await firefox.close();
  for (const b of apart) await b.close();
  await browser.close();
  process.exit(code); // the stdin reader would keep node alive
}
