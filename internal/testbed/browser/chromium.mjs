// Headless Chromium as every script here starts it: fake camera and
// microphone, no background traffic. For the SFU's pages (sfuOrigin set):
// an https: origin is ebrtc sfu's default, encrypted media, and Chromium
// runs as it ships (no WebRTC switch; the page's self-signed certificate
// is accepted by the browser context, contextOptions); an http: origin is
// --unencrypted-media: encryption off (the SFU relays plain RTP) and the
// plain-HTTP origin treated as secure (the page needs a secure context
// for the camera).
import { chromium } from 'playwright-core';

export function launchChromium(sfuOrigin) {
  const args = [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream',
  ];
  if (sfuOrigin && new URL(sfuOrigin).protocol === 'http:') {
    args.push('--disable-webrtc-encryption', '--unsafely-treat-insecure-origin-as-secure=' + sfuOrigin);
  }
  return chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args });
}

// contextOptions are a browser context's for a page at url: an https:
// page of the testbed's SFU has a self-signed certificate, which the
// context accepts (what a user does once by hand).
export function contextOptions(url) {
  return new URL(url).protocol === 'https:' ? { ignoreHTTPSErrors: true } : {};
}

// open loads url in page, again (up to 3 times) when Chromium saw the
// network change under the load (ERR_NETWORK_CHANGED: the testbed's
// namespaces get links, routes and qdiscs while browsers start), or when
// the error page of that failure interrupts the next try (chrome-error:
// it loads after goto has already thrown); a pause lets it settle.
export async function open(page, url) {
  for (let attempt = 1; ; attempt++) {
    try {
      return await page.goto(url);
    } catch (e) {
      const retry = String(e).includes('ERR_NETWORK_CHANGED') || String(e).includes('chrome-error://');
      if (attempt >= 3 || !retry) throw e;
      console.error('reloading ' + url + ' after ' + String(e).split('\n')[0]);
      await new Promise((r) => setTimeout(r, 500));
    }
  }
}
