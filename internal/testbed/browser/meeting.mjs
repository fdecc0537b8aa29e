// N participants join one room of ebrtc sfu in headless Chromium (each in
// its own browser context, encryption off as the SFU needs), stay for
// SECONDS; then the first leaves and rejoins (a reload), and the time until
// it decodes video from every other participant again is measured. Prints
// one JSON line: {stats: each page's inbound stats by publisher, rejoinMs}.
//
// usage: node meeting.mjs URL N SECONDS
import { launchChromium } from './chromium.mjs';

const [url, nArg, secondsArg] = process.argv.slice(2);
if (!url) {
  console.error('usage: node meeting.mjs URL N SECONDS');
  process.exit(2);
}
const n = Number(nArg || 2), seconds = Number(secondsArg || 10);
const browser = await launchChromium(new URL(url).origin);
try {
  const pages = [];
  for (let i = 0; i < n; i++) {
    const page = await (await browser.newContext()).newPage();
    page.on('pageerror', (e) => console.error('page', i, e));
    page.on('console', (m) => console.error('console', i, m.text()));
    await page.goto(url);
    pages.push(page);
  }
  await new Promise((r) => setTimeout(r, seconds * 1000));
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
    await new Promise((r) => setTimeout(r, 100));
  }
  for (const p of pages) console.error("status", await p.evaluate(() => document.getElementById("status").textContent));
  console.log(JSON.stringify({ stats: out, rejoinMs }));
} finally {
  await browser.close();
}
