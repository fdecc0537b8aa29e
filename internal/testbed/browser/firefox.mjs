// Headless Firefox ESR as the SFU tests start it: Debian's firefox-esr,
// driven over WebDriver BiDi by puppeteer-core (no browser download), as
// it ships but for a fake camera and microphone and no permission prompt;
// the testbed SFU's self-signed page certificate accepted (what a user
// does once by hand).
import puppeteer from 'puppeteer-core';

export function launchFirefox() {
  return puppeteer.launch({
    browser: 'firefox',
    protocol: 'webDriverBiDi',
    executablePath: process.env.FIREFOX || '/usr/bin/firefox-esr',
    headless: true,
    acceptInsecureCerts: true,
    extraPrefsFirefox: {
      'media.navigator.streams.fake': true,
      'media.navigator.permission.disabled': true,
    },
  });
}
