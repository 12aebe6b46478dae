// seckill 秒杀 — page script. Plain ES2017, no frameworks, no inline handlers (works under a
// strict `script-src 'self'` CSP). Page data comes from data-* attributes on <body> and cards;
// every string shown comes from the page's language, as JSON in <body data-i18n>.
'use strict';

(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.prototype.slice.call((root || document).querySelectorAll(sel));
  const pad = (n) => String(n).padStart(2, '0');
  const body = document.body;

  // ---------- strings ----------
  let T = {};
  try { T = JSON.parse(body.dataset.i18n || '{}') || {}; } catch (e) { /* labels stay as rendered */ }
  // The string `key` with its {n} / {t} placeholders filled in.
  function tr(key, vars) {
    let text = typeof T[key] === 'string' ? T[key] : key;
    Object.keys(vars || {}).forEach((k) => { text = text.split('{' + k + '}').join(String(vars[k])); });
    return text;
  }

  // ---------- server clock ----------
  // Countdowns run on the server's clock: offset = server now - local now, measured against
  // GET /time (the pages carry no time, so they keep their ETags), halving the round trip.
  let offset = 0;
  const serverNow = () => Date.now() + offset;
  async function syncClock() {
    try {
      const sent = Date.now();
      const res = await fetch('/time', { cache: 'no-store', credentials: 'same-origin' });
      const received = Date.now();
      const data = await res.json();
      const ms = Number(data && data.now_ms);
      if (res.ok && Number.isFinite(ms) && ms > 0) offset = ms - (sent + received) / 2;
    } catch (e) { /* keep the last offset */ }
  }

  // "HH:MM:SS" for a positive duration, rounding up so 00:00:00 shows exactly at the deadline.
  function hms(ms) {
    const s = Math.max(0, Math.ceil(ms / 1000));
    return pad(Math.floor(s / 3600)) + ':' + pad(Math.floor((s % 3600) / 60)) + ':' + pad(s % 60);
  }
  function mmss(ms) {
    const s = Math.max(0, Math.ceil(ms / 1000));
    return pad(Math.floor(s / 60)) + ':' + pad(s % 60);
  }
  function formatDateTime(d) {
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
  }

  // Run `fn` right after every second boundary of server time, so countdowns flip together.
  function everySecond(fn) {
    const loop = () => {
      try { fn(serverNow()); } catch (e) { /* keep ticking */ }
      setTimeout(loop, 1000 - (serverNow() % 1000) + 15);
    };
    loop();
  }

  // ---------- JSON / API helpers ----------
  // Ids are 64-bit: quote integer values of "id" / "*_id" keys before JSON.parse so they never
  // become (lossy) JS numbers. Escaped quotes inside strings cannot match the pattern.
  function parseJson(text) {
    if (!text) return null;
    const safe = text.replace(/("(?:id|[A-Za-z0-9]+_id)"\s*:\s*)(-?\d+)(?=\s*[,}\]])/g, '$1"$2"');
    try { return JSON.parse(safe); } catch (e) { return null; }
  }

  async function api(method, url, jsonBody) {
    const init = {
      method: method,
      credentials: 'same-origin',
      cache: 'no-store',
      headers: { Accept: 'application/json' },
    };
    if (jsonBody !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = jsonBody;
    }
    const res = await fetch(url, init);
    let text = '';
    try { text = await res.text(); } catch (e) { /* empty body */ }
    return { res: res, status: res.status, ok: res.ok, data: parseJson(text) };
  }

  function errorOf(r) {
    const e = r && r.data && r.data.error;
    return {
      code: e && typeof e.code === 'string' ? e.code : '',
      message: e && typeof e.message === 'string' ? e.message : '',
    };
  }

  function loginUrl(next) {
    return '/login?next=' + encodeURIComponent(next || '/');
  }

  // Replace an element's content with text / nodes (never innerHTML with server data).
  function fill(el, parts) {
    while (el.firstChild) el.removeChild(el.firstChild);
    parts.forEach((p) => el.appendChild(typeof p === 'string' ? document.createTextNode(p) : p));
  }
  function node(tag, attrs, text) {
    const el = document.createElement(tag);
    Object.keys(attrs || {}).forEach((k) => el.setAttribute(k, attrs[k]));
    if (text != null) el.textContent = text;
    return el;
  }

  // Retry-After: delta seconds or an HTTP date. Falls back to 1 s, capped at 60 s.
  function retryAfterMs(res) {
    const h = res && res.headers ? res.headers.get('Retry-After') : null;
    let ms = NaN;
    if (h) {
      if (/^\s*\d+(\.\d+)?\s*$/.test(h)) ms = parseFloat(h) * 1000;
      else ms = Date.parse(h) - Date.now();
    }
    if (!Number.isFinite(ms) || ms < 1000) ms = 1000;
    return Math.min(ms, 60000);
  }

  // ======================================================================
  // Sale page
  // ======================================================================

  function initSale() {
    const eventId = body.dataset.eventId || '';
    const signedIn = 'signedIn' in body.dataset;
    const cards = new Map();

    $$('.card[data-product-id]').forEach((el) => {
      const c = {
        el: el,
        id: String(el.dataset.productId),
        startsAt: Number(el.dataset.startsAtMs),
        endsAt: Number(el.dataset.endsAtMs),
        remaining: Number(el.dataset.remaining),
        total: Number(el.dataset.stockTotal),
        serverEnded: el.dataset.status === 'ended',
        paused: 'paused' in el.dataset,
        pending: false,
        bought: false,
        limited: 'held' in el.dataset,
        cooldownUntil: 0,
        // A guarded sale's buys carry a buy token (see fetchToken).
        guard: el.dataset.guard || 'none',
        tokenFrom: Number(el.dataset.tokenFromMs),
        token: null,
        tokenExpires: 0,
        tokenJob: null,
        tokenRetryAt: 0,
        prefetched: false,
        btn: $('[data-buy]', el),
        msg: $('[data-msg]', el),
        countdown: $('[data-countdown]', el),
        bar: $('[data-bar]', el),
        sold: $('[data-sold]', el),
        remainingEl: $('[data-remaining]', el),
        badge: $('[data-badge]', el),
        stockBadge: $('[data-stock-badge]', el),
      };
      // Spread the crowd's token requests over the first half of the token window (30 s at
      // most), so they do not all arrive in the same second.
      const lead = Number.isFinite(c.startsAt - c.tokenFrom) ? c.startsAt - c.tokenFrom : 0;
      c.tokenFrom += Math.random() * Math.min(30000, Math.max(0, lead / 2));
      cards.set(c.id, c);
      if (c.btn) c.btn.addEventListener('click', () => buy(c));
    });

    const tabs = $$('[data-event-tab]').map((el) => ({
      el: el,
      startsAt: Number(el.dataset.startsAtMs),
      endsAt: Number(el.dataset.endsAtMs),
      serverEnded: el.dataset.status === 'ended',
      label: $('[data-tab-status]', el),
    }));

    const clockEl = $('[data-event-clock]');
    const clock = clockEl ? {
      el: clockEl,
      startsAt: Number(clockEl.dataset.startsAtMs),
      endsAt: Number(clockEl.dataset.endsAtMs),
      label: $('[data-clock-label]', clockEl),
      time: $('[data-clock-time]', clockEl),
    } : null;

    // A time of the API (RFC 3339) in ms, or NaN.
    const timeOf = (value) => (typeof value === 'string' ? Date.parse(value) : NaN);

    function timeStatus(startsAt, endsAt, serverEnded, now) {
      if (serverEnded || now >= endsAt) return 'ended';
      if (now < startsAt) return 'upcoming';
      return 'live';
    }

    function setText(el, text) {
      if (el && el.textContent !== text) el.textContent = text;
    }

    function setStatusClass(el, st) {
      el.classList.toggle('is-upcoming', st === 'upcoming');
      el.classList.toggle('is-live', st === 'live');
      el.classList.toggle('is-ended', st === 'ended');
    }

    function renderCard(c, now) {
      const st = timeStatus(c.startsAt, c.endsAt, c.serverEnded, now);
      const soldOut = !(c.remaining > 0);
      let label;
      let disabled = true;
      if (c.pending) label = tr('buying');
      else if (c.bought) label = tr('bought');
      else if (c.limited) label = tr('held');
      else if (soldOut) label = tr('sold_out');
      else if (c.paused && st !== 'ended') label = tr('paused');
      else if (st === 'upcoming') label = tr('not_started');
      else if (st === 'ended') label = tr('ended');
      else if (c.cooldownUntil > Date.now()) label = tr('retry_in', { n: Math.ceil((c.cooldownUntil - Date.now()) / 1000) });
      else { label = tr('buy'); disabled = false; }

      if (c.btn) {
        setText(c.btn, label);
        c.btn.disabled = disabled;
        c.btn.classList.toggle('is-pending', c.pending);
      }
      setStatusClass(c.el, st);
      c.el.classList.toggle('is-soldout', soldOut);
      const paused = c.paused && st !== 'ended';
      c.el.classList.toggle('is-paused', paused);
      setText(c.badge, paused ? tr('paused') : tr(st));
      if (st === 'upcoming') setText(c.countdown, tr('to_start') + hms(c.startsAt - now));
      else if (st === 'live') setText(c.countdown, tr('to_end') + hms(c.endsAt - now));
      else setText(c.countdown, tr('ended'));
    }

    function renderStock(c, percent) {
      const total = c.total > 0 ? c.total : 0;
      let pct = Number(percent);
      if (!Number.isFinite(pct)) pct = total > 0 ? Math.floor(((total - Math.max(0, c.remaining)) * 100) / total) : 0;
      pct = Math.max(0, Math.min(100, Math.round(pct)));
      if (c.bar) {
        c.bar.value = pct;
        c.bar.setAttribute('aria-label', tr('sold', { n: pct }));
      }
      setText(c.sold, tr('sold', { n: pct }));
      setText(c.remainingEl, String(Math.max(0, c.remaining)));
      // The rule of the server's `almost_gone`: stock left, at most a tenth of it.
      const left = Math.max(0, c.remaining);
      const almostGone = left > 0 && left * 10 <= total;
      if (c.stockBadge) {
        setText(c.stockBadge, left <= 0 ? tr('sold_out') : (almostGone ? tr('almost_gone') : ''));
        c.stockBadge.hidden = left > 0 && !almostGone;
      }
      c.el.dataset.remaining = String(Math.max(0, c.remaining));
    }

    function renderAll(now) {
      cards.forEach((c) => renderCard(c, now));
      tabs.forEach((t) => {
        const st = timeStatus(t.startsAt, t.endsAt, t.serverEnded, now);
        setStatusClass(t.el, st);
        setText(t.label, tr(st));
      });
      if (clock) {
        const st = timeStatus(clock.startsAt, clock.endsAt, false, now);
        clock.el.classList.toggle('is-ended', st === 'ended');
        if (st === 'upcoming') { setText(clock.label, tr('clock_to_start')); setText(clock.time, hms(clock.startsAt - now)); }
        else if (st === 'live') { setText(clock.label, tr('clock_to_end')); setText(clock.time, hms(clock.endsAt - now)); }
        else { setText(clock.label, tr('clock_ended')); setText(clock.time, ''); }
      }
    }

    function showMsg(c, kind, parts) {
      if (!c.msg) return;
      c.msg.className = 'card-msg' + (kind ? ' is-' + kind : '');
      fill(c.msg, parts || []);
    }

    // ---------- guarded sales ----------
    // A guarded product's buy carries a buy token. The page fetches it once during the
    // countdown (solving the puzzle of a `challenge` sale first), so the button works the second
    // the sale opens; a token that has run out by the click is fetched again then.
    function hasToken(c) {
      return c.token !== null && c.tokenExpires - serverNow() > 2000;
    }

    // One token request at a time per card; resolves to the last answer.
    function fetchToken(c) {
      if (!c.tokenJob) {
        c.tokenJob = requestToken(c).finally(() => { c.tokenJob = null; });
      }
      return c.tokenJob;
    }

    async function requestToken(c) {
      let answer = {};
      if (c.guard === 'challenge') {
        const r = await api('GET', '/api/v1/products/' + c.id + '/challenge');
        const puzzle = r.data || {};
        if (!r.ok || typeof puzzle.challenge !== 'string') return tokenRefused(c, r);
        const nonce = await window.seckillPow.solve(puzzle.challenge, Number(puzzle.difficulty) || 0);
        answer = { challenge: puzzle.challenge, nonce: nonce };
      }
      const r = await api('POST', '/api/v1/products/' + c.id + '/buy-token', JSON.stringify(answer));
      const granted = r.data || {};
      const expires = timeOf(granted.expires_at);
      if (!r.ok || typeof granted.token !== 'string' || !Number.isFinite(expires)) return tokenRefused(c, r);
      c.token = granted.token;
      c.tokenExpires = expires;
      return r;
    }

    // Holds off the next automatic try: as long as the server asks, else a few seconds.
    function tokenRefused(c, r) {
      c.tokenRetryAt = Date.now() + (r.status === 401 ? 60000 : Math.max(retryAfterMs(r.res), 5000));
      return r;
    }

    // Called every second: fetches the tokens due, for a signed-in shopper who may still buy.
    function prefetchTokens(now) {
      if (!signedIn) return;
      cards.forEach((c) => {
        if (c.guard === 'none' || c.prefetched || c.tokenJob || c.bought || c.limited) return;
        if (!(c.remaining > 0) || timeStatus(c.startsAt, c.endsAt, c.serverEnded, now) === 'ended') return;
        if (now < c.tokenFrom || Date.now() < c.tokenRetryAt) return;
        fetchToken(c).then(() => { c.prefetched = hasToken(c); }, () => { c.tokenRetryAt = Date.now() + 5000; });
      });
    }

    // The buy request, with the buy token of a guarded sale; a token refused (it ran out on
    // the way) is fetched again once. The token request's answer when no token could be had.
    async function placeOrder(c) {
      for (let attempt = 0; ; attempt++) {
        let token = '';
        if (c.guard !== 'none') {
          if (!hasToken(c)) {
            const refused = await fetchToken(c);
            if (!hasToken(c)) return refused;
          }
          token = ',"buy_token":' + JSON.stringify(c.token);
        }
        // The id goes in as a JSON number built from its decimal string: exact for any i64.
        const r = await api('POST', '/api/v1/orders', '{"product_id":' + c.id + ',"quantity":1' + token + '}');
        if (attempt > 0 || errorOf(r).code !== 'invalid_buy_token') return r;
        c.token = null;
      }
    }

    async function buy(c) {
      if (c.pending || !c.btn || c.btn.disabled) return;
      if (!/^\d+$/.test(c.id)) return;
      c.pending = true;
      renderCard(c, serverNow()); // disables the button at once
      showMsg(c, '', []);

      let r;
      try {
        r = await placeOrder(c);
      } catch (e) {
        c.pending = false;
        showMsg(c, 'error', [tr('network_error')]);
        renderCard(c, serverNow());
        return;
      }
      c.pending = false;

      if (r.ok) {
        c.bought = true;
        const d = r.data || {};
        const orderId = d.order_id != null ? String(d.order_id) : '';
        const parts = [tr('buy_ok')];
        if (orderId) parts.push(tr('order_no'), node('code', {}, orderId), ' ');
        const payBefore = typeof d.pay_before === 'string' ? Date.parse(d.pay_before) : NaN;
        if (Number.isFinite(payBefore)) {
          parts.push(tr('pay_before', { t: pad(new Date(payBefore).getHours()) + ':' + pad(new Date(payBefore).getMinutes()) }));
        } else {
          parts.push(tr('pay_soon'));
        }
        parts.push(node('a', { href: '/orders' }, tr('go_pay')));
        showMsg(c, 'ok', parts);
        if (c.remaining > 0) { c.remaining -= 1; renderStock(c); }
      } else if (r.status === 401) {
        window.location.href = loginUrl(window.location.pathname + window.location.search);
        return;
      } else {
        const err = errorOf(r);
        const code = err.code || (r.status === 429 ? 'rate_limited' : '');
        switch (code) {
          case 'sold_out':
            c.remaining = 0;
            renderStock(c, 100);
            showMsg(c, 'error', [tr('sold_out_msg')]);
            break;
          case 'limit_reached':
            c.limited = true;
            showMsg(c, 'info', [tr('limit_msg'), node('a', { href: '/orders' }, tr('view_orders'))]);
            break;
          case 'not_started':
            c.cooldownUntil = Date.now() + 1000;
            showMsg(c, 'info', [tr('not_started_msg')]);
            break;
          case 'ended':
            c.serverEnded = true;
            showMsg(c, 'info', [tr('ended_msg')]);
            break;
          case 'sale_paused':
            c.paused = true;
            showMsg(c, 'info', [tr('paused_msg')]);
            break;
          case 'buy_token_required':
          case 'invalid_buy_token':
          case 'challenge_required':
          case 'invalid_challenge_answer':
          case 'too_early':
            showMsg(c, 'error', [tr('guard_failed')]);
            break;
          case 'rate_limited':
          case 'backlog_full': {
            const wait = retryAfterMs(r.res);
            c.cooldownUntil = Date.now() + wait;
            showMsg(c, 'info', [tr('rate_limited_msg', { n: Math.ceil(wait / 1000) })]);
            setTimeout(() => renderCard(c, serverNow()), wait + 20);
            break;
          }
          default:
            showMsg(c, 'error', [tr('buy_failed') + ' (' + (err.code || 'HTTP ' + r.status) + ')']);
        }
      }
      renderCard(c, serverNow());
    }

    // ---------- live stock polling ----------
    let eventEndsAt = clock ? clock.endsAt : Math.max.apply(null, [0].concat(Array.from(cards.values()).map((c) => c.endsAt)));
    let pollTimer = null;
    let polling = false;
    let allEndedByServer = false;

    function eventOver() {
      return allEndedByServer || (eventEndsAt > 0 && serverNow() >= eventEndsAt);
    }

    function applyEvent(data) {
      if (!data || typeof data !== 'object') return;
      if (data.status === 'ended') {
        cards.forEach((c) => { c.serverEnded = true; });
        tabs.forEach((t) => { if (t.el.classList.contains('is-selected')) t.serverEnded = true; });
      }
      // An operator may end the event early: its clock and the polling follow the new end.
      const eventEnd = timeOf(data.ends_at);
      if (Number.isFinite(eventEnd)) {
        eventEndsAt = eventEnd;
        if (clock) clock.endsAt = eventEnd;
      }
      const list = Array.isArray(data.products) ? data.products : [];
      list.forEach((p) => {
        if (!p || p.id == null) return;
        const c = cards.get(String(p.id));
        if (!c) return;
        const rem = Number(p.remaining);
        if (Number.isFinite(rem)) c.remaining = rem;
        const tot = Number(p.stock_total);
        if (Number.isFinite(tot)) c.total = tot;
        if (p.status === 'ended') c.serverEnded = true;
        const ends = timeOf(p.ends_at);
        if (Number.isFinite(ends)) c.endsAt = ends;
        if (typeof p.paused === 'boolean') {
          // Resumed: the pause's message is stale.
          if (c.paused && !p.paused) showMsg(c, '', []);
          c.paused = p.paused;
        }
        renderStock(c, p.sold_percent);
      });
      allEndedByServer = cards.size > 0 && Array.from(cards.values()).every((c) => c.serverEnded);
      renderAll(serverNow());
    }

    async function poll() {
      pollTimer = null;
      if (polling || eventOver()) return;
      if (document.hidden) return; // resumed by visibilitychange
      polling = true;
      try {
        const r = await api('GET', '/api/v1/events/' + encodeURIComponent(eventId));
        if (r.ok) applyEvent(r.data);
      } catch (e) {
        /* fail quietly; try again next round */
      }
      polling = false;
      schedule();
    }

    function schedule() {
      if (pollTimer === null && !eventOver() && !document.hidden) pollTimer = setTimeout(poll, 2000);
    }

    if (eventId && cards.size > 0) {
      schedule();
      document.addEventListener('visibilitychange', () => {
        if (!document.hidden && pollTimer === null && !polling) poll();
      });
    }

    everySecond((now) => {
      renderAll(now);
      prefetchTokens(now);
    });
    // Sync at load, then now and then, so a drifting device still opens the sale on time.
    syncClock().then(() => renderAll(serverNow()));
    setInterval(syncClock, 60000);
  }

  // ======================================================================
  // Login page
  // ======================================================================
  const AUTH_CODES = ['invalid_credentials', 'user_disabled', 'username_taken', 'invalid_username', 'weak_password', 'rate_limited',
    'too_many_registrations', 'too_many_sign_ins', 'busy', 'invalid_challenge_answer'];

  function initLogin() {
    let next = body.dataset.next || '/';
    if (next.charAt(0) !== '/' || next.charAt(1) === '/' || next.charAt(1) === '\\') next = '/';

    function authError(r, fallback) {
      const err = errorOf(r);
      if (AUTH_CODES.indexOf(err.code) >= 0) return tr(err.code);
      return tr(fallback) + ' (' + (err.code || 'HTTP ' + r.status) + ')';
    }

    // Registering where the server asks for a solved puzzle first: one for this username.
    async function registerSolving(username, password) {
      const r = await api('GET', '/api/v1/registration/challenge?username=' + encodeURIComponent(username));
      const puzzle = r.data || {};
      if (!r.ok || typeof puzzle.challenge !== 'string') return r;
      const nonce = await window.seckillPow.solve(puzzle.challenge, Number(puzzle.difficulty) || 0);
      const answer = { username: username, password: password, challenge: puzzle.challenge, nonce: nonce };
      return api('POST', '/api/v1/users', JSON.stringify(answer));
    }

    $$('form[data-auth]').forEach((form) => {
      const mode = form.dataset.auth;
      const msg = $('[data-msg]', form);
      const submit = $('button[type="submit"]', form);
      const submitText = submit ? submit.innerHTML : '';

      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        if (submit && submit.disabled) return;
        const username = form.elements.username.value.trim();
        const password = form.elements.password.value;
        msg.textContent = '';
        if (!username || !password) {
          msg.textContent = tr('credentials_required');
          return;
        }
        const payload = JSON.stringify({ username: username, password: password });
        if (submit) { submit.disabled = true; submit.textContent = tr(mode === 'register' ? 'registering' : 'signing_in'); }
        const done = (text) => {
          msg.textContent = text;
          if (submit) { submit.disabled = false; submit.innerHTML = submitText; }
        };
        try {
          if (mode === 'register') {
            let reg = await api('POST', '/api/v1/users', payload);
            if (errorOf(reg).code === 'challenge_required') reg = await registerSolving(username, password);
            if (!reg.ok) { done(authError(reg, 'register_failed')); return; }
          }
          const r = await api('POST', '/api/v1/sessions', payload);
          if (!r.ok) { done(authError(r, 'login_failed')); return; }
          window.location.assign(next);
        } catch (e) {
          done(tr('network_error'));
        }
      });
    });

    const demo = $('[data-demo-fill]');
    const loginForm = $('form[data-auth="login"]');
    if (demo && loginForm) {
      demo.addEventListener('click', () => {
        loginForm.elements.username.value = 'alice';
        loginForm.elements.password.value = 'alice-password';
        const btn = $('button[type="submit"]', loginForm);
        if (btn) btn.focus();
      });
    }
  }

  // ======================================================================
  // Orders page
  // ======================================================================
  function initOrders() {
    $$('time[data-time-ms]').forEach((t) => {
      const ms = Number(t.dataset.timeMs);
      if (!Number.isFinite(ms) || ms <= 0) return;
      const d = new Date(ms);
      t.dateTime = d.toISOString();
      t.textContent = formatDateTime(d);
    });

    const rows = $$('tr[data-order-id]')
      .filter((el) => el.dataset.status === 'awaiting_payment')
      .map((el) => ({
        el: el,
        id: String(el.dataset.orderId), // 64-bit snowflake: keep as a string
        payBefore: Number(el.dataset.payBeforeMs),
        left: $('[data-pay-left]', el),
        timer: $('[data-pay-timer]', el),
        pay: $('[data-action="pay"]', el),
        cancel: $('[data-action="cancel"]', el),
        msg: $('[data-msg]', el),
        busy: false,
        expired: false,
      }));

    function renderRow(row, now) {
      const left = row.payBefore - now;
      if (!(left > 0)) {
        if (!row.expired) {
          row.expired = true;
          row.el.classList.add('is-expired');
          if (row.timer) row.timer.textContent = tr('expired');
        }
        if (row.pay) row.pay.disabled = true;
      } else if (row.left) {
        const t = mmss(left);
        if (row.left.textContent !== t) row.left.textContent = t;
      }
    }

    async function act(row, action) {
      if (row.busy) return;
      if (!/^\d+$/.test(row.id)) return;
      row.busy = true;
      if (row.pay) row.pay.disabled = true;
      if (row.cancel) row.cancel.disabled = true;
      if (row.msg) row.msg.textContent = '';
      try {
        const r = await api('POST', '/api/v1/orders/' + row.id + '/' + action);
        if (r.ok && action === 'pay' && r.data && typeof r.data.pay_url === 'string') {
          window.location.href = r.data.pay_url;
          return;
        }
        if (r.ok) { window.location.reload(); return; }
        if (r.status === 401) { window.location.href = loginUrl('/orders'); return; }
        const err = errorOf(r);
        if (row.msg) row.msg.textContent = tr(action === 'pay' ? 'pay_failed' : 'cancel_failed') + ' (' + (err.code || 'HTTP ' + r.status) + ')';
      } catch (e) {
        if (row.msg) row.msg.textContent = tr('network_error');
      }
      row.busy = false;
      if (row.cancel) row.cancel.disabled = false;
      if (row.pay) row.pay.disabled = row.expired;
      renderRow(row, serverNow());
    }

    rows.forEach((row) => {
      if (row.pay) row.pay.addEventListener('click', () => act(row, 'pay'));
      if (row.cancel) row.cancel.addEventListener('click', () => act(row, 'cancel'));
    });

    if (rows.length) {
      everySecond((now) => rows.forEach((row) => renderRow(row, now)));
      syncClock();
    }
  }

  const page = body.dataset.page;
  if (page === 'sale') initSale();
  else if (page === 'login') initLogin();
  else if (page === 'orders') initOrders();
})();
