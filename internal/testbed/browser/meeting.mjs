// N participants join one room of ebrtc sfu in headless Chromium (each in
// its own browser context; as it ships for an https: URL, encryption off
// for an http: one: chromium.mjs), stay for
// SECONDS; then the first leaves and rejoins (a reload), and the time until
// it decodes video from every other participant again is measured. Prints
// one JSON line: {stats: each page's inbound stats by publisher, rejoinMs}.
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
  const begin = Date.now();
  for (const [i, step] of schedule.entries()) {
    await sleep(begin + i * seconds * 1000 / schedule.length - Date.now());
    const enc = await apply(pages[0], step);
    console.error(`schedule step ${i} at ${Date.now() - begin} ms: ${JSON.stringify(step)} -> encoding ${JSON.stringify(enc)}`);
  }
  await sleep(begin + seconds * 1000 - Date.now());
  const out = [];
  for (const p of pages) out.push(await p.evaluate(() => window.meeting.stats));
  // Leave and rejoin: a reload closes the signaling socket and joins anew.
  const start = Date.now();
  await pages[0].reload();
  let rejoinMs = -1;
  while (Date.now() - start < 15000) {
    const st = await pages[0].evaluate(() => window.meeting.stats);
    const streams = Object.values(st);
    if (streams.length === n - 1 && streams.every((x) => x.video && x.video.framesDecoded > 0)) {
      rejoinMs = Date.now() - start;
      break;
    }
    await sleep(100);
  }
  for (const p of pages) console.error("status", await p.evaluate(() => document.getElementById("status").textContent));
  const media = await pages[1].evaluate(() => window.meeting.media);
  const ciphers = [];
  for (const p of pages) {
    ciphers.push(await p.evaluate(async () => {
      const out = [];
      const pcs = [window.meeting.pub, ...window.meeting.subs.values()].filter((pc) => pc && pc.getStats);
      for (const pc of pcs) {
        for (const r of (await pc.getStats()).values()) if (r.type === 'transport') out.push(r.srtpCipher || '');
      }
      return out;
    }));
  }
  console.log(JSON.stringify({ stats: out, rejoinMs, media, ciphers }));
} finally {
  for (const b of Object.values(browsers)) await b.close();
}
