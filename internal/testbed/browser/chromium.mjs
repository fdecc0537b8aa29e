// Headless Chromium as every script here starts it: fake camera and
// microphone, no background traffic. For the SFU's pages (sfuOrigin set):
// encryption off (ebrtc sfu relays plain RTP) and the plain-HTTP origin
// treated as secure (the page needs a secure context for the camera).
import { chromium } from 'playwright-core';

export function launchChromium(sfuOrigin) {
  const args = [
    '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    '--use-fake-device-for-media-stream', '--use-fake-ui-for-media-stream',
  ];
  if (sfuOrigin) {
    args.push('--disable-webrtc-encryption', '--unsafely-treat-insecure-origin-as-secure=' + sfuOrigin);
  }
  return chromium.launch({ executablePath: process.env.CHROMIUM || '/usr/bin/chromium', args });
}
