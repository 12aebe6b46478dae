// The shop driven in Debian's headless Chromium (scripts/browser-test starts the server):
// register, buy in the live sale, pay on the sandbox checkout, see the order paid; the
// operator creates a product that appears on the sale page, opens on its countdown and sells
// out, and the live dashboard shows the sale; an event guarded by a puzzle whose product the
// page buys at its start with the buy token it fetched during the countdown; the operator
// refunds the paid order; the language switch. Every page shown is checked for what keeps it
// from a screen reader or a weak eye (axe-core's rules: labels, names, contrast, landmarks).
// Usage: node tests/browser/shop.mjs <base-url>; screenshots go to $SECKILL_SCREENSHOTS.
import { chromium } from 'playwright-core';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';

const base = process.argv[2];
if (!base) {
  console.error('usage: node tests/browser/shop.mjs <base-url>');
  process.exit(2);
}
const adminToken = process.env.SECKILL_ADMIN_TOKEN;
const shots = process.env.SECKILL_SCREENSHOTS || 'target/browser-screenshots';
mkdirSync(shots, { recursive: true });

// axe-core, evaluated into each page through the browser's debugging protocol, which the pages'
// Content-Security-Policy does not govern (a script tag would be refused, as it should be).
const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');
// What fails the run: problems that stop or seriously hinder a reader, contrast among them.
const BLOCKING = new Set(['serious', 'critical']);

const VIEWPORTS = { phone: { width: 375, height: 812 }, desktop: { width: 1280, height: 800 } };
const TIMEOUT = 15000;

function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  console.log('ok: ' + what);
}

// The page as it is must pass axe-core's WCAG 2.1 A and AA rules, none of them seriously broken.
async function accessible(page, name) {
  if (!(await page.evaluate(() => 'axe' in window))) await page.evaluate(AXE);
  const { violations } = await page.evaluate(() =>
    window.axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } }));
  const blocking = violations.filter((v) => BLOCKING.has(v.impact));
  for (const v of blocking) {
    console.error(`${name}: ${v.id} (${v.impact}): ${v.help}`);
    for (const node of v.nodes.slice(0, 5)) console.error('  ' + node.target.join(' ') + ': ' + node.failureSummary.replace(/\n/g, ' '));
  }
  check(blocking.length === 0, `${name} has no serious accessibility problem (${violations.length} minor)`);
}

// A full-page screenshot of the page as it is, once per viewport, then back to the first; at
// each size the page must fit the screen's width (nothing to scroll sideways on a phone). The
// page must also be accessible.
async function screenshots(page, name) {
  await accessible(page, name);
  const original = page.viewportSize();
  for (const [kind, size] of Object.entries(VIEWPORTS)) {
    await page.setViewportSize(size);
    const wide = await page.evaluate(() => document.documentElement.scrollWidth);
    check(wide <= size.width, `${name} fits a ${kind} screen (${wide} of ${size.width} px)`);
    await page.screenshot({ path: join(shots, `${name}-${kind}.png`), fullPage: true });
  }
  await page.setViewportSize(original);
}

// Reloads until the predicate holds on the page as the server renders it, not as the page's
// own script last drew it.
async function reloadUntil(page, predicate, what) {
  const deadline = Date.now() + TIMEOUT;
  for (;;) {
    await page.reload();
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error('timed out waiting for ' + what);
    await page.waitForTimeout(300);
  }
}

async function register(page, username) {
  await page.goto(base + '/login');
  await screenshots(page, 'login');
  const form = page.locator('form[data-auth="register"]');
  await form.locator('input[name="username"]').fill(username);
  await form.locator('input[name="password"]').fill(username + '-password');
  await Promise.all([page.waitForURL((u) => !u.pathname.startsWith('/login')), form.locator('button[type="submit"]').click()]);
  check((await page.locator('.user-name').textContent()).trim() === username, `registered ${username} is signed in`);
}

// Clicks a card's buy button and waits for the outcome shown in place.
async function buy(page, card) {
  const button = card.locator('button[data-buy]');
  check(await button.isEnabled(), 'the buy button of a live product is enabled');
  await button.click();
  await card.locator('[data-msg].is-ok').waitFor();
  check(await button.isDisabled(), 'the buy button is greyed out after the click');
  return (await card.locator('[data-msg] code').textContent()).trim();
}

async function buyAndPay(page) {
  await page.goto(base + '/');
  await screenshots(page, 'sale');
  const card = page.locator('article[data-status="live"]:not(.is-soldout):not([data-held])').first();
  const orderId = await buy(page, card);
  check(/^\d+$/.test(orderId), `the sale page shows the new order ${orderId}`);

  await page.goto(base + '/orders');
  const row = page.locator(`tr[data-order-id="${orderId}"]`);
  await reloadUntil(page, async () => (await row.count()) > 0, `order ${orderId} on /orders`);
  check((await row.getAttribute('data-status')) === 'awaiting_payment', 'the order awaits payment');
  await screenshots(page, 'orders');

  await Promise.all([page.waitForURL(/\/sandbox\//), row.locator('[data-action="pay"]').click()]);
  check((await page.locator('dd').allTextContents()).some((t) => t.trim() === orderId), 'the sandbox checkout names the order');
  await screenshots(page, 'sandbox-checkout');
  await Promise.all([page.waitForURL((u) => !u.pathname.startsWith('/sandbox/')), page.locator('button[value="pay"]').click()]);

  // The return page refreshes itself while the payment notice is on its way.
  await page.waitForSelector('body[data-page="pay-return"][data-status="paid"]');
  check((await page.locator('body').getAttribute('data-order-id')) === orderId, 'the return page shows the order paid');
  await screenshots(page, 'pay-return');
  await page.goto(base + '/orders');
  check((await row.getAttribute('data-status')) === 'paid', 'the order is paid on /orders');
}

// The console's time fields take whole minutes, in UTC.
const minuteField = (ms) => new Date(ms).toISOString().slice(0, 16);

// The first whole minute at least 5 s away.
const nextMinute = () => Math.ceil((Date.now() + 5000) / 60000) * 60000;

async function signInToConsole(page) {
  await page.goto(base + '/admin');
  await screenshots(page, 'admin-login');
  await page.locator('input[name="token"]').fill(adminToken);
  await Promise.all([page.waitForURL((u) => !u.pathname.startsWith('/admin/login')), page.locator('button[type="submit"]').click()]);
}

// The operator creates an event guarded by a puzzle, opening at the next minute, with a
// one-piece product, and the shopper opens its sale page in a second tab during the countdown.
// The page's own script must fetch the buy token before the start (solving the puzzle), so the
// button works the second the sale opens: buyGuardedSale checks that after the start.
async function openGuardedSale(context, page) {
  const startsAt = nextMinute();
  const title = 'Guarded ' + Date.now().toString(36);
  await page.goto(base + '/admin/products');
  const eventForm = page.locator('form[action="/admin/events"]');
  await eventForm.locator('input[name="title"]').fill(title);
  await eventForm.locator('input[name="starts_at"]').fill(minuteField(startsAt));
  await eventForm.locator('input[name="ends_at"]').fill(minuteField(startsAt + 3600000));
  await eventForm.locator('select[name="guard"]').selectOption('challenge');
  await Promise.all([page.waitForLoadState('load'), eventForm.locator('button[type="submit"]').click()]);
  const row = page.locator('tr[data-event-id]').filter({ hasText: title });
  check((await row.count()) === 1, 'the console lists the new guarded event');
  check((await row.locator('select[name="guard"]').inputValue()) === 'challenge', 'the console shows the event guarded by a puzzle');
  const eventId = await row.getAttribute('data-event-id');

  const name = 'Guarded item ' + Date.now();
  const productForm = page.locator('form[action="/admin/products"]');
  await productForm.locator('input[name="name"]').fill(name);
  await productForm.locator('input[name="event_id"]').fill(eventId);
  await productForm.locator('input[name="original_price"]').fill('59.00');
  await productForm.locator('input[name="sale_price"]').fill('5.90');
  await productForm.locator('input[name="stock"]').fill('1');
  await Promise.all([page.waitForURL(/\/admin\/products\/\d+$/), productForm.locator('button[type="submit"]').click()]);

  const tab = await context.newPage();
  tab.on('pageerror', (e) => { failed = true; console.error('page error: ' + e.message); });
  const asked = { challenge: null, token: null };
  tab.on('response', (r) => {
    const path = new URL(r.url()).pathname;
    if (path.endsWith('/challenge') && !asked.challenge) asked.challenge = { at: Date.now(), status: r.status() };
    if (path.endsWith('/buy-token') && !asked.token) asked.token = { at: Date.now(), status: r.status() };
  });
  await tab.goto(base + '/?event=' + eventId);
  const hashes = await tab.evaluate(() => [window.seckillPow.sha256Hex('abc'), window.seckillPow.sha256Hex('0123456789'.repeat(13))]);
  check(hashes[0] === 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad' &&
    hashes[1] === createHash('sha256').update('0123456789'.repeat(13)).digest('hex'), "the page's SHA-256 agrees with known digests");
  const card = tab.locator('article[data-product-id]').filter({ has: tab.getByText(name, { exact: true }) });
  check((await card.getAttribute('data-guard')) === 'challenge', 'the guarded product says so on its card');
  check(await card.locator('button[data-buy]').isDisabled(), 'before its start the guarded product cannot be bought');
  await screenshots(tab, 'sale-guarded');
  return { tab, card, startsAt, asked };
}

async function buyGuardedSale({ tab, card, startsAt, asked }) {
  const button = card.locator('button[data-buy]');
  await tab.waitForFunction((el) => !el.disabled, await button.elementHandle(), { timeout: Math.max(startsAt - Date.now(), 0) + TIMEOUT });
  check(asked.challenge !== null && asked.challenge.status === 200, 'the page asked for the puzzle');
  check(asked.token !== null && asked.token.status === 200 && asked.token.at < startsAt,
    'the page solved the puzzle and had its buy token before the start');
  const orderId = await buy(tab, card);
  check(/^\d+$/.test(orderId), `the guarded product is bought through the page (order ${orderId})`);
  await tab.close();
}

// The operator signs in and creates a one-piece product in the live event whose sale opens at
// the next minute; it appears on the sale page counting down, the buy button comes alive at
// the start without a reload, a shopper buys it, and after that the page shows it sold out.
async function adminProductSellsOut(page) {
  await page.goto(base + '/');
  const eventId = await page.locator('body').getAttribute('data-event-id');
  check(/^\d+$/.test(eventId || ''), 'the sale page selects the live event');
  // The product's window: from the first whole minute at least 5 s away to the event's end.
  const startsAt = nextMinute();
  const eventEnd = Number(await page.locator('[data-event-clock]').getAttribute('data-ends-at-ms'));
  const endsAt = Math.floor(eventEnd / 60000) * 60000;
  check(endsAt > startsAt, 'the live event lasts past the next minute');

  await page.goto(base + '/admin/products');
  const name = 'Browser test item ' + Date.now();
  const form = page.locator('form[action="/admin/products"]');
  await form.locator('input[name="name"]').fill(name);
  await form.locator('input[name="event_id"]').fill(eventId);
  await form.locator('input[name="original_price"]').fill('99.00');
  await form.locator('input[name="sale_price"]').fill('9.90');
  await form.locator('input[name="stock"]').fill('1');
  await form.locator('input[name="starts_at"]').fill(minuteField(startsAt));
  await form.locator('input[name="ends_at"]').fill(minuteField(endsAt));
  await Promise.all([page.waitForLoadState('load'), form.locator('button[type="submit"]').click()]);
  const refusal = await page.locator('[role="alert"]').allTextContents();
  check(refusal.length === 0, 'the console takes the new product' + (refusal.length ? ': ' + refusal.join(' ') : ''));
  check(await page.getByText(name).count() > 0, 'the console lists the new product');
  await screenshots(page, 'admin-products');

  await page.goto(base + '/?event=' + eventId);
  const card = page.locator('article[data-product-id]').filter({ has: page.getByText(name, { exact: true }) });
  check((await card.count()) === 1, 'the new product appears on the sale page');
  const button = card.locator('button[data-buy]');
  check((await card.getAttribute('data-status')) === 'upcoming' && (await button.isDisabled()), 'before its start the product cannot be bought');
  check(/\d\d:\d\d/.test(await card.locator('[data-countdown]').textContent()), 'the card counts down to the start');
  await screenshots(page, 'sale-countdown');
  await page.waitForFunction((el) => !el.disabled, await button.elementHandle(), { timeout: Math.max(startsAt - Date.now(), 0) + TIMEOUT });
  check(Date.now() >= startsAt - 1000, 'the buy button comes alive at the start, without a reload');
  await buy(page, card);
  await reloadUntil(page, async () => (await card.getAttribute('class')).includes('is-soldout'), 'the product sold out');
  const badge = card.locator('[data-stock-badge]');
  check((await badge.isVisible()) && (await badge.textContent()).trim() === (await card.locator('.stamp').textContent()).trim(), 'the sold-out badge is shown');
  check(await card.locator('button[data-buy]').isDisabled(), 'a sold-out product cannot be bought');
  await screenshots(page, 'sale-sold-out');
  return name;
}

// The operator's live dashboard, kept current by its script: the sold-out product's line, the
// buys per second, and a gate that balances with the database.
async function dashboardShowsTheSale(page, name) {
  await page.goto(base + '/admin/dashboard');
  await page.waitForFunction(() => document.getElementById('dash-status').textContent === 'Live.');
  // Two snapshots at least, so the per-second figures are drawn.
  await page.waitForFunction(() => document.querySelector('.dash-line-accepted').getAttribute('points') !== '');
  const row = page.locator('#dash-products tr').filter({ has: page.getByText(name, { exact: true }) });
  const cells = await row.locator('td').allTextContents();
  check(cells[1] === '1' && cells[2] === '0', `the dashboard shows ${name} sold out (${cells.join(' | ')})`);
  check(cells[8] === '0', 'the gate balances with the database');
  check(await page.locator('#dash-products .dash-off').count() === 0, 'no product is highlighted as drifting');
  check(/^\d+\.\d$/.test(await page.locator('#dash-rate').textContent()), 'the dashboard shows buys per second');
  check((await page.locator('#dash-buys-from').textContent()) === 'this server', 'an embedded server shows its own buys');
  await screenshots(page, 'admin-dashboard');
}

// The console's other pages, as the operator signed in above sees them.
async function consolePages(page) {
  for (const [path, name] of [['/admin/dashboard', 'admin-dashboard'], ['/admin/orders', 'admin-orders'], ['/admin/audit', 'admin-audit'], ['/admin/users', 'admin-users']]) {
    await page.goto(base + path);
    check(new URL(page.url()).pathname === path, `the console shows ${path}`);
    await screenshots(page, name);
  }
  await page.goto(base + '/admin/products');
  await Promise.all([page.waitForURL(/\/admin\/products\/\d+$/), page.locator('a[href^="/admin/products/"]').first().click()]);
  await screenshots(page, 'admin-product');

  // The shopper's paid order, found by its status and refunded with its button: the console
  // tells the outcome, and the shopper's orders show it refunded.
  await page.goto(base + '/admin/orders?status=paid');
  const refund = page.locator('form[data-refund]').first();
  const orderId = await refund.getAttribute('data-refund');
  check(/^\d+$/.test(orderId || ''), `the console finds the paid order ${orderId} with its Refund button`);
  await screenshots(page, 'admin-orders-paid');
  await Promise.all([page.waitForURL(/refunded=/), refund.locator('button').click()]);
  const outcome = await page.locator('[role="status"]').textContent();
  check(outcome.includes(`Order ${orderId} is refunded.`), `the console refunds it: ${outcome}`);
  await page.goto(base + '/orders');
  check((await page.locator(`tr[data-order-id="${orderId}"]`).getAttribute('data-status')) === 'refunded', 'the shopper sees it refunded');
}

async function languageSwitch(page) {
  await page.goto(base + '/');
  const before = { lang: await page.locator('html').getAttribute('lang'), title: await page.locator('h1').first().textContent() };
  await Promise.all([page.waitForLoadState('load'), page.locator('[data-lang-switch]').click()]);
  await page.waitForFunction((lang) => document.documentElement.lang !== lang, before.lang);
  const after = { lang: await page.locator('html').getAttribute('lang'), title: await page.locator('h1').first().textContent() };
  check(before.lang !== after.lang, `the switch changes <html lang> from ${before.lang} to ${after.lang}`);
  check(before.title.trim() !== after.title.trim(), `the switch changes the page text (${before.title.trim()} → ${after.title.trim()})`);
  await screenshots(page, 'sale-switched');
  await page.reload();
  check((await page.locator('html').getAttribute('lang')) === after.lang, 'the chosen language survives a reload');
}

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
let failed = false;
try {
  const context = await browser.newContext({ viewport: VIEWPORTS.desktop, locale: 'zh-CN' });
  context.setDefaultTimeout(TIMEOUT);
  const page = await context.newPage();
  page.on('pageerror', (e) => { failed = true; console.error('page error: ' + e.message); });
  await register(page, 'shopper' + Date.now().toString(36));
  await buyAndPay(page);
  if (adminToken) {
    await signInToConsole(page);
    const guarded = await openGuardedSale(context, page);
    const sold = await adminProductSellsOut(page);
    await buyGuardedSale(guarded);
    await dashboardShowsTheSale(page, sold);
    await consolePages(page);
  } else console.log('skipped: the operator console (SECKILL_ADMIN_TOKEN is not set)');
  await languageSwitch(page);
  if (failed) throw new Error('a page threw a script error');
  console.log('all browser checks passed');
} catch (e) {
  failed = true;
  console.error(e);
} finally {
  await browser.close();
}
process.exit(failed ? 1 : 0);
