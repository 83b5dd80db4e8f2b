// The console's browser test (TestBrowser runs it with node): Debian's chromium
// driven by playwright-core against a real stack. Every step prints "ok STEP";
// the first failure throws (exit 1). Inputs come from the environment:
//   PLAYWRIGHT  the playwright-core package directory
//   BASE        the controller's URL
//   ADMIN, OPERATOR, VIEWER  API tokens of each role
//   SESSION     NODE/ID of a session to type in; XSS: NODE/ID of one whose title,
//               command and output are HTML; REPLAY: NODE/ID of one that ran
//               four blocks (sleep 0.3; echo one … four); AGENT and CHILD:
//               NODE/ID of an agent and of its child
//   ARTIFACTS   where the screenshots go
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(import.meta.url);
const { chromium } = require(process.env.PLAYWRIGHT);
const env = process.env;
const base = env.BASE;
const [node, sid] = env.SESSION.split('/');
const [xnode, xsid] = env.XSS.split('/');
const shot = (page, name) => page.screenshot({ path: path.join(env.ARTIFACTS, `${name}.png`), fullPage: true });
const ok = (step, more = '') => console.log(`ok ${step}${more ? ' ' + more : ''}`);
const fail = (msg) => { throw new Error(msg); };

// api calls the API as a bearer client (the test's side, not the browser's).
async function api(token, method, p, body) {
  const res = await fetch(base + p, {
    method,
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return { status: res.status, body: await res.json().catch(() => null) };
}

// bufferHas waits until a line of the page's xterm buffer is exactly text.
async function bufferHas(page, text, timeout = 15000) {
  await page.waitForFunction((t) => {
    const term = window.fleetmuxTerm;
    if (!term) return false;
    const b = term.buffer.active;
    for (let i = 0; i < b.length; i++) if (b.getLine(i).translateToString(true).trim() === t) return true;
    return false;
  }, text, { timeout });
}

async function signIn(page, token) {
  await page.goto(base + '/ui/');
  await page.waitForSelector('#signin');
  await page.fill('#token', token);
  await page.click('#signin button[type=submit]');
  await page.waitForSelector('#nav:not([hidden])');
}

const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox'] });
const errors = [];
let page;
try {
  const admin = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  page = await admin.newPage();
  page.on('pageerror', (e) => errors.push(e.message));
  const dialogs = [];
  page.on('dialog', (d) => { dialogs.push(d.message()); d.accept(); });

  // Sign in: the page never keeps the token.
  await page.goto(base + '/ui/');
  await page.waitForSelector('#signin');
  await shot(page, 'signin');
  await signIn(page, env.ADMIN);
  const stored = await page.evaluate(() => JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.documentElement.outerHTML + location.href);
  if (stored.includes(env.ADMIN)) fail('the token is in the page, its URL or its storage');
  const cookies = await admin.cookies();
  const ck = cookies.find((c) => c.name === 'fleetmux_session');
  if (!ck || !ck.httpOnly || ck.sameSite !== 'Strict' || ck.value.includes(env.ADMIN)) fail(`cookie ${JSON.stringify(cookies)}`);
  if (await page.evaluate(() => document.cookie) !== '') fail('the page can read a cookie');
  ok('signin');

  // Fleet: the node is listed, alive.
  await page.waitForSelector(`#nodes tr[data-node="${node}"]`);
  const row = await page.textContent(`#nodes tr[data-node="${node}"]`);
  if (!row.includes('alive')) fail(`fleet row: ${row}`);
  const nav = await page.evaluate(() => {
    const n = performance.getEntriesByType('navigation')[0];
    return { ttfb: n.responseStart - n.requestStart, load: n.loadEventEnd - n.startTime };
  });
  await shot(page, 'fleet');
  ok('fleet', `ttfb_ms=${nav.ttfb.toFixed(1)} load_ms=${nav.load.toFixed(1)}`);

  // Sessions: listed, and the HTML title is text.
  await page.click('#nav a[href="/ui/sessions"]');
  await page.waitForSelector(`#sessions tr[data-session="${env.SESSION}"]`);
  await page.waitForSelector(`#sessions tr[data-session="${env.XSS}"]`);
  await shot(page, 'sessions');
  ok('sessions');

  // A session: type `echo hi` into the page's terminal; its output shows in the
  // xterm buffer (the screen came first, then live bytes).
  await page.goto(`${base}/ui/sessions/${node}/${sid}`);
  await page.waitForFunction(() => window.fleetmuxTiming && window.fleetmuxTiming.firstByte !== undefined);
  const timing = await page.evaluate(() => window.fleetmuxTiming);
  await page.click('#terminal');
  await page.keyboard.type('echo hi\n');
  await bufferHas(page, 'hi');
  await page.waitForSelector('#blocks li[data-n]', { timeout: 10000 }); // from the change stream (the floor poll is 30 s)
  await page.click('#blocks li[data-n]');
  await page.waitForSelector('#block-output:not([hidden])');
  await shot(page, 'session');
  ok('terminal', `first_byte_ms=${timing.firstByte.toFixed(1)} ws_open_ms=${timing.wsOpen.toFixed(1)}`);

  // Keystroke echo: from a key typed into the page's terminal to its echo drawn
  // in the buffer (in the page: attach, node, shell and back).
  const echo = await page.evaluate(async () => {
    const term = window.fleetmuxTerm;
    const times = [];
    for (const ch of 'abcdefghijklmnopqrstuvwxyz0123') {
      const t0 = performance.now();
      await new Promise((resolve) => {
        const d = term.onWriteParsed(() => {
          const b = term.buffer.active;
          if (b.getLine(b.baseY + b.cursorY).translateToString(true).endsWith(ch)) { d.dispose(); resolve(); }
        });
        term.input(ch);
      });
      times.push(performance.now() - t0);
    }
    term.input('\x15'); // C-u: the line goes
    times.sort((a, b) => a - b);
    return { p50: times[Math.floor(times.length / 2)], p95: times[Math.floor(times.length * 0.95)] };
  });
  if (!(echo.p95 < 1000)) fail(`keystroke echo p95 ${echo.p95} ms`);
  ok('echo', `p50_ms=${echo.p50.toFixed(1)} p95_ms=${echo.p95.toFixed(1)}`);

  // Take over: another writer holds the lease (an operator typed through the
  // API); the page takes it after a confirmation.
  const took = await api(env.OPERATOR, 'POST', `/v1/sessions/${node}/${sid}/take_over`);
  if (took.status !== 200) fail(`the operator's take-over: ${JSON.stringify(took)}`);
  const typed = await api(env.OPERATOR, 'POST', `/v1/sessions/${node}/${sid}/input`, { data: '#' });
  if (typed.status !== 200) fail(`the operator's input: ${JSON.stringify(typed)}`);
  await page.click('#take-over');
  await page.waitForFunction(() => document.querySelector('#term-status').textContent.startsWith('you hold the writer lease'));
  if (!dialogs.some((m) => m.startsWith(`Take over ${node}/${sid}?`))) fail(`no confirmation before the take-over: ${JSON.stringify(dialogs)}`);
  await page.click('#terminal');
  await page.keyboard.press('Control+U'); // the operator's '#' goes
  ok('takeover', await page.textContent('#term-status'));

  // Resize: fit the session to the page's terminal; the session takes the size.
  const before = await api(env.ADMIN, 'GET', `/v1/sessions/${node}/${sid}`);
  await page.click('#fit');
  const size = await page.evaluate(() => ({ cols: window.fleetmuxTerm.cols, rows: window.fleetmuxTerm.rows }));
  if (size.cols === before.body.cols && size.rows === before.body.rows) fail(`fitting changed nothing: ${JSON.stringify(size)}`);
  let sized;
  for (const deadline = Date.now() + 10000; Date.now() < deadline;) {
    sized = (await api(env.ADMIN, 'GET', `/v1/sessions/${node}/${sid}`)).body;
    if (sized.cols === size.cols && sized.rows === size.rows) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  if (sized.cols !== size.cols || sized.rows !== size.rows) fail(`the session is ${sized.cols}x${sized.rows}, the page ${size.cols}x${size.rows}`);
  ok('resize', `${before.body.cols}x${before.body.rows} -> ${size.cols}x${size.rows}`);

  // XSS: a title, a command and output that are HTML stay text everywhere.
  await page.goto(`${base}/ui/sessions/${xnode}/${xsid}`);
  await page.waitForSelector('#blocks li[data-n]');
  await page.click('#blocks li[data-n]');
  await page.waitForSelector('#block-output:not([hidden])');
  await bufferHas(page, '<img src=x onerror=window.__xss=2>');
  const onPage = await page.evaluate(() => ({ ran: window.__xss, imgs: document.querySelectorAll('main img').length, out: document.querySelector('#block-output').textContent, title: document.querySelector('h1 .title').textContent }));
  if (onPage.ran !== undefined || onPage.imgs !== 0 || !onPage.out.includes('<img') || !onPage.title.includes('<img')) fail(`XSS on the session page: ${JSON.stringify(onPage)}`);
  await page.goto(`${base}/ui/sessions`);
  await page.waitForSelector(`#sessions tr[data-session="${env.XSS}"]`);
  const xss = await page.evaluate(() => ({ ran: window.__xss, imgs: document.querySelectorAll('main img').length, title: document.querySelector('#sessions td.title') && [...document.querySelectorAll('#sessions td.title')].map((t) => t.textContent).join('|') }));
  if (xss.ran !== undefined || xss.imgs !== 0 || !xss.title.includes('<img')) fail(`XSS: ${JSON.stringify(xss)}`);
  ok('xss');

  // Approvals: a command held by an approve rule appears without a reload, and
  // runs once approved.
  await page.click('#nav a[href="/ui/approvals"]');
  await page.waitForSelector('#pending');
  let held;
  for (const deadline = Date.now() + 15000; Date.now() < deadline;) {
    // The writer lease of the page's typing may still run (busy): ask again.
    held = await api(env.OPERATOR, 'POST', `/v1/sessions/${node}/${sid}/run`, { command: 'echo approved-$((6*7)) # needs-ok', timeout_ms: 30000 });
    if (held.status !== 409 || held.body.error.code !== 'busy') break;
    await new Promise((r) => setTimeout(r, 250));
  }
  if (held.status !== 409 || !held.body.error.approval) fail(`held run: ${JSON.stringify(held)}`);
  const addr = held.body.error.approval;
  const card = `#pending .approval[data-approval="${addr}"]`;
  // From the change stream (GET /v1/events): the page's fallback poll is 30 s.
  await page.waitForSelector(card, { timeout: 10000 });
  await shot(page, 'approvals');
  await page.fill(`${card} input.reason`, 'looks fine');
  await page.click(`${card} button.approve`);
  await page.waitForSelector(`#decided tr[data-approval="${addr}"]`);
  const [an, aid] = addr.split('/');
  let decided;
  for (let i = 0; i < 100; i++) {
    decided = await api(env.ADMIN, 'GET', `/v1/approvals/${an}/${aid}?wait_ms=200`);
    if (decided.body.state === 'approved' && decided.body.exit_code !== undefined) break;
  }
  if (decided.body.state !== 'approved' || decided.body.exit_code !== 0 || decided.body.reason !== 'looks fine') fail(`approval: ${JSON.stringify(decided.body)}`);
  const block = await api(env.ADMIN, 'GET', `/v1/sessions/${node}/${sid}/blocks/${decided.body.block}`);
  if (!String(block.body.text).includes('approved-42')) fail(`the approved block: ${JSON.stringify(block.body)}`);
  ok('approvals');

  // Agents: the tree (the child under its parent), states and their source.
  await page.click('#nav a[href="/ui/agents"]');
  const childItem = `#agents li[data-agent="${env.AGENT}"] li[data-agent="${env.CHILD}"]`;
  await page.waitForFunction((sel) => { const li = document.querySelector(sel); return li && /ready/.test(li.textContent) && /from screen/.test(li.textContent); }, childItem, { timeout: 15000 });
  await shot(page, 'agents');
  ok('agents');

  // Replay: the recording in asciinema-player, a marker per block; the button of
  // block 3 jumps to its marker.
  const [rnode, rsid] = env.REPLAY.split('/');
  await page.goto(`${base}/ui/replay/${rnode}/${rsid}`);
  await page.waitForSelector('#markers button[data-block="3"]');
  const mark = await page.evaluate(() => window.fleetmuxMarkers.find((m) => m.block === 3));
  if (!mark || !mark.label.startsWith('block 3: ') || !mark.label.includes('echo three') || mark.time < 0.6) fail(`marker of block 3: ${JSON.stringify(mark)}`);
  await page.click('#markers button[data-block="3"]');
  await page.waitForFunction(async (t) => Math.abs(await window.fleetmuxPlayer.getCurrentTime() - t) < 0.05, mark.time, { timeout: 10000 });
  await shot(page, 'replay');
  ok('replay', `block 3 at ${mark.time.toFixed(3)}s`);

  // Live: the player on the session's /live stream shows what runs now.
  await page.click('#watch-live');
  await page.waitForSelector('#player .ap-player');
  const live = await api(env.ADMIN, 'POST', `/v1/sessions/${rnode}/${rsid}/run`, { command: 'echo live-$((6*7))', timeout_ms: 20000 });
  if (live.status !== 200) fail(`run while live: ${JSON.stringify(live)}`);
  await page.waitForFunction(() => document.querySelector('#player').textContent.includes('live-42'), null, { timeout: 10000 });
  await shot(page, 'live');
  ok('live');

  // A viewer: the page has no input path, and the API refuses what it forges.
  const vctx = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const vpage = await vctx.newPage();
  vpage.on('pageerror', (e) => errors.push(e.message));
  await signIn(vpage, env.VIEWER);
  await vpage.goto(`${base}/ui/sessions/${node}/${sid}`);
  await vpage.waitForSelector('#view-only');
  await bufferHas(vpage, 'hi');
  if (await vpage.$('#take-over') || await vpage.$('#fit')) fail('a viewer has controls');
  if (!await vpage.evaluate(() => window.fleetmuxTerm.options.disableStdin)) fail("a viewer's terminal takes input");
  await vpage.click('#terminal');
  await vpage.keyboard.type('echo viewer-typed\n');
  const forged = await vpage.evaluate(async ([n, s]) => {
    const me = await (await fetch('/ui/me')).json();
    const post = await fetch(`/v1/sessions/${n}/${s}/input`, { method: 'POST', headers: { 'Content-Type': 'application/json', 'X-Fleetmux-CSRF': me.csrf }, body: JSON.stringify({ data: 'echo forged\r' }) });
    const ws = await new Promise((resolve) => {
      const w = new WebSocket(`ws://${location.host}/v1/sessions/${n}/${s}/attach`);
      w.binaryType = 'arraybuffer';
      w.onopen = () => w.send(new TextEncoder().encode('echo forged-ws\r'));
      w.onmessage = (e) => { if (typeof e.data === 'string') { const m = JSON.parse(e.data); if (m.type === 'error') resolve(m.error.code); } };
      w.onclose = () => resolve('closed');
    });
    return { post: post.status, ws };
  }, [node, sid]);
  if (forged.post !== 403 || forged.ws !== 'forbidden') fail(`a viewer's forged input: ${JSON.stringify(forged)}`);
  let after;
  for (const deadline = Date.now() + 15000; Date.now() < deadline;) {
    after = await api(env.ADMIN, 'POST', `/v1/sessions/${node}/${sid}/run`, { command: 'echo after-viewer', timeout_ms: 20000 });
    if (after.status !== 409 || after.body.error.code !== 'busy') break;
    await new Promise((r) => setTimeout(r, 250));
  }
  if (after.status !== 200) fail(`run after the viewer: ${JSON.stringify(after)}`);
  const scr = await api(env.ADMIN, 'GET', `/v1/sessions/${node}/${sid}/screen`);
  if (/viewer-typed|forged/.test(scr.body.text)) fail(`a viewer typed into the session:\n${scr.body.text}`);
  await shot(vpage, 'viewer-session');
  // The viewer sees what waits for approval, and nothing to decide it with.
  await vpage.click('#nav a[href="/ui/approvals"]');
  await vpage.waitForSelector('#pending .approval');
  if (await vpage.$('#pending button')) fail('a viewer has approve or deny buttons');
  ok('viewer');

  // Sign-out ends the cookie: the page is back at sign-in, and the old cookie
  // is refused when replayed.
  await page.goto(base + '/ui/');
  await page.waitForSelector('#signout:not([hidden])');
  await page.click('#signout');
  await page.waitForSelector('#signin');
  const replayed = await fetch(base + '/v1/nodes', { headers: { Cookie: `${ck.name}=${ck.value}` } });
  if (replayed.status !== 401) fail(`the signed-out cookie, replayed: ${replayed.status}`);
  const left = (await admin.cookies()).filter((c) => c.name === ck.name);
  if (left.length) fail(`the cookie is still in the browser: ${JSON.stringify(left)}`);
  ok('signout');

  if (errors.length) fail(`page errors: ${errors.join('; ')}`);
} catch (e) {
  // What the page showed, for a failure seen only in CI.
  if (page) {
    const seen = await page.evaluate(() => ({ url: location.href, main: (document.querySelector('main') || document.body).innerText.slice(0, 1500) })).catch((err) => ({ error: String(err) }));
    console.log(`failed on the page: ${JSON.stringify(seen)}`);
  }
  console.log(`page errors: ${JSON.stringify(errors)}`);
  const [rn, rs] = env.REPLAY.split('/');
  const rec = await fetch(`${base}/v1/sessions/${rn}/${rs}/recording`, { headers: { Authorization: `Bearer ${env.ADMIN}` } }).catch((err) => null);
  const text = rec ? await rec.text() : '';
  console.log(`the replay session's recording: ${rec && rec.status}, markers: ${JSON.stringify(text.split('\n').filter((l) => l.includes('"m"')))}`);
  throw e;
} finally {
  await browser.close();
}
