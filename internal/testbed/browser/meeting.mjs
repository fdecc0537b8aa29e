// N participants join one room of ebrtc sfu in headless Chromium (each in
// its own browser context; as it ships for an https: URL, encryption off
// for an http: one: chromium.mjs), stay for
// SECONDS; then the first leaves and rejoins (a reload), and the time until
// it decodes video from every other participant again is measured. Prints
// one JSON line: {stats: each page's inbound stats by publisher, ids: each
// page's participant id, views: what each page shows muted of the others,
// paused: whose video the SFU paused for each page (at the end),
// speakers: whom each page highlights as speaking (at the end),
// rejoinMs, media, ciphers, paths (each connection's selected local
// candidate: host, or relay/tcp through a TURN server), toggle}.
//
// SCHEDULE, if given, drives the first participant's video encoder while
// the participants stay: a comma-separated list of steps, each MODE or
// MODE/SCALE (the encoding's scalabilityMode, and its
// scaleResolutionDownBy when SCALE is given), applied through the video
// sender's setParameters (other fields kept) evenly across SECONDS: step i
// at i*SECONDS/len. Each applied step is logged on standard error. A
// scale stays until a later step sets another (L1T3/2,L1T3/1 goes back).
//   e.g. L1T3,L1T2,L1T3,L1T1,L1T3,L1T3/2
//
// BROWSERS (environment), if set, is a comma-separated list of the
// participants' browsers in turn: chromium (the default) or firefox
// (Firefox ESR over WebDriver BiDi: firefox.mjs), e.g. firefox,chromium.
//
// TOGGLE (environment), if set, is the index of a participant that turns
// its camera off and mutes its microphone (the page's buttons) at a third
// of SECONDS and turns both on again at two thirds; the output's toggle
// has every page's stats 2 s after the first click (off) and just before
// the second (on), what each page shows of that participant then
// (views), and its video sender's bytes at both moments.
//
// SCREEN (environment), if set, is the index of a participant (not the
// first, which rejoins) that shares a screen once every page is open: a
// 640x360 canvas drawing a moving picture at 5 fps (a slide deck's pace), its track's content
// hint "detail" as a screen capture's, published by the page's
// shareScreen (a connection of its own); the rejoin then waits for the
// screen's stream too.
//
// SPEAKER (environment), if set, is the index of a participant (not the
// first) whose microphone is replaced, once every page is open, by a
// steady tone (WebAudio, about -14 dBov): the one who speaks, against
// the fake microphone's beep (about -74 dBov on average); the output's
// speakers say whom each page highlights at the end.
//
// OTHERS (environment), if set, is how many publishers join the room from
// elsewhere (another run of this script): the rejoin waits for them too.
// REJOIN=0 skips the rejoin; HOLD keeps the pages that long at the end.
//
// A page whose token is a viewer's publishes nothing; the rejoin waits
// for the streams of the other pages that publish.
//
// usage: node meeting.mjs 'URL...' N SECONDS [SCHEDULE]
import { launchChromium, contextOptions, open } from './chromium.mjs';
import { launchFirefox } from './firefox.mjs';

const [urlArg, nArg, secondsArg, scheduleArg] = process.argv.slice(2);
if (!urlArg) {
  console.error('usage: node meeting.mjs URL N SECONDS [SCHEDULE]');
  process.exit(2);
}
// URL is one address for every page (open rooms) or, space-separated, one
// per page (each with its own join token).
const urls = urlArg.split(/\s+/).filter((u) => u);
const urlFor = (i) => urls[Math.min(i, urls.length - 1)];
const n = Number(nArg || 2), seconds = Number(secondsArg || 10);
const schedule = (scheduleArg || '').split(',').filter((s) => s).map((s) => {
  const [mode, scale] = s.split('/');
  if (!mode || (scale !== undefined && !(Number(scale) >= 1))) {
    console.error('schedule step ' + JSON.stringify(s) + ': want MODE or MODE/SCALE, e.g. L1T2 or L1T3/2');
    process.exit(2);
  }
  return scale === undefined ? { mode } : { mode, scale: Number(scale) };
});
const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));

// apply sets one step on the page's video sender once it has one (the page
// creates its publishing connection when its signaling socket opens) and
// returns the encoding as the sender then reports it.
async function apply(page, step) {
  return page.evaluate(async ({ mode, scale }) => {
    for (let i = 0; ; i++) {
      const pub = window.meeting && window.meeting.pub;
      const sender = pub && pub.getSenders().find((s) => s.track && s.track.kind === 'video');
      if (sender) {
        const params = sender.getParameters();
        params.encodings[0].scalabilityMode = mode;
        if (scale !== undefined) params.encodings[0].scaleResolutionDownBy = scale;
        await sender.setParameters(params);
        return sender.getParameters().encodings[0];
      }
      if (i === 100) throw new Error('no video sender after 10 s');
      await new Promise((r) => setTimeout(r, 100));
    }
  }, step);
}

const kinds = (process.env.BROWSERS || 'chromium').split(',');
const browsers = {};
// newPage opens a page in a browser context of its own, in the kind of
// browser participant i uses (each kind launched once).
async function newPage(i) {
  const kind = kinds[i % kinds.length];
  if (kind === 'firefox') {
    browsers.firefox ||= await launchFirefox();
    return (await browsers.firefox.createBrowserContext()).newPage();
  }
  if (kind !== 'chromium') throw new Error('BROWSERS: ' + kind + ' (want chromium or firefox)');
  browsers.chromium ||= await launchChromium(new URL(urlFor(0)).origin);
  return (await browsers.chromium.newContext(contextOptions(urlFor(0)))).newPage();
}

try {
  const pages = [];
  for (let i = 0; i < n; i++) {
    const page = await newPage(i);
    page.on('pageerror', (e) => console.error('page', i, e));
    page.on('console', (m) => console.error('console', i, m.text()));
    await open(page, urlFor(i));
    pages.push(page);
  }
  const sharer = process.env.SCREEN === undefined ? -1 : Number(process.env.SCREEN);
  if (sharer >= 0) {
    await pages[sharer].waitForFunction(() => window.meeting && window.meeting.id && window.meeting.pub);
    await pages[sharer].evaluate(async () => {
      const c = document.createElement('canvas');
      c.width = 640; c.height = 360;
      const g = c.getContext('2d');
      let n = 0;
      setInterval(() => {
        g.fillStyle = '#224'; g.fillRect(0, 0, 640, 360);
        g.fillStyle = '#eee'; g.font = '48px sans-serif'; g.fillText('slide ' + Math.floor(n / 15) + ' / frame ' + n, 40, 120);
        g.fillStyle = '#c83'; g.fillRect((n * 7) % 600, 200, 40, 40);
        n++;
      }, 1000 / 5);
      const track = c.captureStream(5).getVideoTracks()[0];
      track.contentHint = 'detail';
      await window.shareScreen(track);
    });
    console.error(`screen: participant ${sharer} shares a canvas`);
  }
  const talker = process.env.SPEAKER === undefined ? -1 : Number(process.env.SPEAKER);
  if (talker >= 0) {
    await pages[talker].waitForFunction(() => window.meeting && window.meeting.pub &&
      window.meeting.pub.getSenders().some((s) => s.track && s.track.kind === 'audio'));
    await pages[talker].click('body'); // a user's gesture: the page may make sound
    await pages[talker].evaluate(async () => {
      const ctx = new AudioContext();
      await ctx.resume();
      const osc = ctx.createOscillator(), gain = ctx.createGain(), dst = ctx.createMediaStreamDestination();
      osc.frequency.value = 220;
      gain.gain.value = 0.3;
      osc.connect(gain).connect(dst);
      osc.start();
      const tx = window.meeting.pub.getSenders().find((s) => s.track && s.track.kind === 'audio');
      await tx.replaceTrack(dst.stream.getAudioTracks()[0]);
      window.meeting.tone = ctx;
    });
    console.error(`speaker: participant ${talker} speaks (a tone)`);
  }
  const begin = Date.now();
  for (const [i, step] of schedule.entries()) {
    await sleep(begin + i * seconds * 1000 / schedule.length - Date.now());
    const enc = await apply(pages[0], step);
    console.error(`schedule step ${i} at ${Date.now() - begin} ms: ${JSON.stringify(step)} -> encoding ${JSON.stringify(enc)}`);
  }
  let toggle;
  const toggled = process.env.TOGGLE === undefined ? -1 : Number(process.env.TOGGLE);
  if (toggled >= 0) {
    const stats = () => Promise.all(pages.map((p) => p.evaluate(() => window.meeting.stats)));
    const videoBytesSent = () => pages[toggled].evaluate(async () => {
      let n = 0;
      (await window.meeting.pub.getStats()).forEach((r) => { if (r.type === 'outbound-rtp' && r.kind === 'video') n += r.bytesSent; });
      return n;
    });
    const click = async () => { await pages[toggled].click('#camBtn'); await pages[toggled].click('#micBtn'); };
    await sleep(begin + seconds * 1000 / 3 - Date.now());
    // A page the browser's autoplay policy kept silent (a viewer opened no
    // microphone) asks for a click to play the others' audio: give it.
    for (const p of pages) {
      if (await p.evaluate(() => !document.getElementById('hearBtn').hidden)) await p.click('#hearBtn');
    }
    await click();
    console.error(`toggle: participant ${toggled}'s camera and microphone off at ${Date.now() - begin} ms`);
    await sleep(2000);
    const id = await pages[toggled].evaluate(() => window.meeting.id);
    toggle = { id, off: await stats(), sentAtOff: await videoBytesSent(),
      views: await Promise.all(pages.map((p) => p.evaluate((id) => window.meeting.remoteMuted[id] || null, id))) };
    await sleep(begin + seconds * 2000 / 3 - Date.now());
    toggle.on = await stats();
    toggle.sentAtOn = await videoBytesSent();
    await click();
    console.error(`toggle: on again at ${Date.now() - begin} ms`);
  }
  await sleep(begin + seconds * 1000 - Date.now());
  const out = [], ids = [], views = [], paused = [], speakers = [];
  for (const p of pages) {
    speakers.push(await p.evaluate(() => window.meeting.speaker));
    out.push(await p.evaluate(() => window.meeting.stats));
    ids.push(await p.evaluate(() => window.meeting.id));
    views.push(await p.evaluate(() => window.meeting.remoteMuted));
    paused.push(await p.evaluate(() => window.meeting.paused));
  }
  // Leave and rejoin: a reload closes the signaling socket and joins anew
  // (with the token the join gave: a token joins once).
  let publishers = 0;
  for (const p of pages.slice(1)) if (!(await p.evaluate(() => window.meeting.viewer))) publishers++;
  if (sharer > 0) publishers++; // its screen: a stream of its own
  publishers += Number(process.env.OTHERS || 0); // publishing from another process (another network)
  const start = Date.now();
  const rejoin = process.env.REJOIN !== '0';
  if (rejoin) await pages[0].reload();
  let rejoinMs = -1;
  while (rejoin && Date.now() - start < 15000) {
    const st = await pages[0].evaluate(() => window.meeting.stats);
    const streams = Object.values(st);
    // A stream whose camera is off (?camera=off) counts once its audio comes.
    const off = await pages[0].evaluate(() => window.meeting.remoteMuted);
    const playing = ([id, x]) => (off[id] && off[id].video) ? (x.audio && x.audio.packetsReceived > 0) : (x.video && x.video.framesDecoded > 0);
    if (streams.length === publishers && Object.entries(st).every(playing)) {
      rejoinMs = Date.now() - start;
      break;
    }
    await sleep(100);
  }
  for (const p of pages) console.error("status", await p.evaluate(() => document.getElementById("status").textContent));
  const media = await pages[Math.min(1, pages.length - 1)].evaluate(() => window.meeting.media);
  const ciphers = [], paths = [];
  for (const p of pages) {
    const [c, path] = await p.evaluate(async () => {
      const cs = [], ps = [];
      const pcs = [window.meeting.pub, window.meeting.screen && window.meeting.screen.pc, ...window.meeting.subs.values()].filter((pc) => pc && pc.getStats);
      for (const pc of pcs) {
        const report = await pc.getStats();
        // The selected pair's local candidate: host, or relay (and how the
        // browser reaches its TURN server). Chromium names the pair in its
        // transport's stats; Firefox has none and marks the pair selected.
        const path = (pair) => {
          const local = pair && report.get(pair.localCandidateId);
          return local ? local.candidateType + (local.relayProtocol ? '/' + local.relayProtocol : '') : '';
        };
        let transports = 0;
        for (const r of report.values()) {
          if (r.type !== 'transport') continue;
          transports++;
          cs.push(r.srtpCipher || '');
          ps.push(path(r.selectedCandidatePairId && report.get(r.selectedCandidatePairId)));
        }
        if (transports === 0) {
          for (const r of report.values()) if (r.type === 'candidate-pair' && r.selected) ps.push(path(r));
        }
      }
      return [cs, ps];
    });
    ciphers.push(c);
    paths.push(path);
  }
  console.log(JSON.stringify({ stats: out, ids, views, paused, speakers, rejoinMs, media, ciphers, paths, toggle }));
  // HOLD (environment): seconds the pages stay once done (another run of
  // this script in the room may still be measuring them).
  await sleep(1000 * Number(process.env.HOLD || 0));
} finally {
  for (const b of Object.values(browsers)) await b.close();
}
