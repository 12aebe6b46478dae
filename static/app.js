// seckill 秒杀 — page script. Plain ES2017, no frameworks, no inline handlers (works under a
// strict `script-src 'self'` CSP). Page data comes from data-* attributes on <body> and cards.
'use strict';

(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.prototype.slice.call((root || document).querySelectorAll(sel));
  const pad = (n) => String(n).padStart(2, '0');
  const body = document.body;

  // ---------- server clock ----------
  // Countdowns run on the server's clock: offset = server now - local now, taken at load.
  let offset = 0;
  const serverMsAtLoad = Number(body.dataset.nowMs);
  if (Number.isFinite(serverMsAtLoad) && serverMsAtLoad > 0) offset = serverMsAtLoad - Date.now();
  const serverNow = () => Date.now() + offset;

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
  const STATUS_TEXT = { upcoming: '即将开始', live: '抢购中', ended: '已结束' };

  function initSale() {
    const eventId = body.dataset.eventId || '';
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
        pending: false,
        bought: false,
        limited: 'held' in el.dataset,
        cooldownUntil: 0,
        btn: $('[data-buy]', el),
        msg: $('[data-msg]', el),
        countdown: $('[data-countdown]', el),
        bar: $('[data-bar]', el),
        sold: $('[data-sold]', el),
        remainingEl: $('[data-remaining]', el),
        badge: $('[data-badge]', el),
      };
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
      if (c.pending) label = '抢购中…';
      else if (c.bought) label = '已抢到';
      else if (c.limited) label = '已购买';
      else if (soldOut) label = '已抢光';
      else if (st === 'upcoming') label = '未开始';
      else if (st === 'ended') label = '已结束';
      else if (c.cooldownUntil > Date.now()) label = Math.ceil((c.cooldownUntil - Date.now()) / 1000) + ' 秒后重试';
      else { label = '立即抢购'; disabled = false; }

      if (c.btn) {
        setText(c.btn, label);
        c.btn.disabled = disabled;
        c.btn.classList.toggle('is-pending', c.pending);
      }
      setStatusClass(c.el, st);
      c.el.classList.toggle('is-soldout', soldOut);
      setText(c.badge, STATUS_TEXT[st]);
      if (st === 'upcoming') setText(c.countdown, '距开始 ' + hms(c.startsAt - now));
      else if (st === 'live') setText(c.countdown, '距结束 ' + hms(c.endsAt - now));
      else setText(c.countdown, '已结束');
    }

    function renderStock(c, percent) {
      const total = c.total > 0 ? c.total : 0;
      let pct = Number(percent);
      if (!Number.isFinite(pct)) pct = total > 0 ? Math.floor(((total - Math.max(0, c.remaining)) * 100) / total) : 0;
      pct = Math.max(0, Math.min(100, Math.round(pct)));
      if (c.bar) {
        c.bar.value = pct;
        c.bar.setAttribute('aria-label', '已抢 ' + pct + '%');
      }
      setText(c.sold, String(pct));
      setText(c.remainingEl, String(Math.max(0, c.remaining)));
      c.el.dataset.remaining = String(Math.max(0, c.remaining));
    }

    function renderAll(now) {
      cards.forEach((c) => renderCard(c, now));
      tabs.forEach((t) => {
        const st = timeStatus(t.startsAt, t.endsAt, t.serverEnded, now);
        setStatusClass(t.el, st);
        setText(t.label, STATUS_TEXT[st]);
      });
      if (clock) {
        const st = timeStatus(clock.startsAt, clock.endsAt, false, now);
        clock.el.classList.toggle('is-ended', st === 'ended');
        if (st === 'upcoming') { setText(clock.label, '本场距开始'); setText(clock.time, hms(clock.startsAt - now)); }
        else if (st === 'live') { setText(clock.label, '本场距结束'); setText(clock.time, hms(clock.endsAt - now)); }
        else { setText(clock.label, '本场已结束'); setText(clock.time, ''); }
      }
    }

    function showMsg(c, kind, parts) {
      if (!c.msg) return;
      c.msg.className = 'card-msg' + (kind ? ' is-' + kind : '');
      fill(c.msg, parts || []);
    }

    async function buy(c) {
      if (c.pending || !c.btn || c.btn.disabled) return;
      if (!/^\d+$/.test(c.id)) return;
      c.pending = true;
      renderCard(c, serverNow()); // disables the button at once
      showMsg(c, '', []);

      let r;
      try {
        // The id goes in as a JSON number built from its decimal string: exact for any i64.
        r = await api('POST', '/api/v1/orders', '{"product_id":' + c.id + ',"quantity":1}');
      } catch (e) {
        c.pending = false;
        showMsg(c, 'error', ['网络异常，请重试 · Network error, please retry']);
        renderCard(c, serverNow());
        return;
      }
      c.pending = false;

      if (r.ok) {
        c.bought = true;
        const d = r.data || {};
        const orderId = d.order_id != null ? String(d.order_id) : '';
        const parts = ['抢购成功！'];
        if (orderId) parts.push('订单 ', node('code', {}, orderId), ' ');
        const payBefore = typeof d.pay_before === 'string' ? Date.parse(d.pay_before) : NaN;
        if (Number.isFinite(payBefore)) {
          parts.push('请于 ' + pad(new Date(payBefore).getHours()) + ':' + pad(new Date(payBefore).getMinutes()) + ' 前完成支付。');
        } else {
          parts.push('请尽快完成支付。');
        }
        parts.push(node('a', { href: '/orders' }, '去支付 →'));
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
            showMsg(c, 'error', ['手慢了，已抢光 · Sold out']);
            break;
          case 'limit_reached':
            c.limited = true;
            showMsg(c, 'info', ['您已购买过该商品 · You already bought this item ', node('a', { href: '/orders' }, '查看订单 →')]);
            break;
          case 'not_started':
            c.cooldownUntil = Date.now() + 1000;
            showMsg(c, 'info', ['活动尚未开始，请稍候 · Not started yet']);
            break;
          case 'ended':
            c.serverEnded = true;
            showMsg(c, 'info', ['活动已结束 · This sale has ended']);
            break;
          case 'rate_limited': {
            const wait = retryAfterMs(r.res);
            c.cooldownUntil = Date.now() + wait;
            showMsg(c, 'info', ['人太多啦，请 ' + Math.ceil(wait / 1000) + ' 秒后再试 · Too many requests']);
            setTimeout(() => renderCard(c, serverNow()), wait + 20);
            break;
          }
          default:
            showMsg(c, 'error', [err.message || ('抢购失败，请重试 (HTTP ' + r.status + ')')]);
        }
      }
      renderCard(c, serverNow());
    }

    // ---------- live stock polling ----------
    const eventEndsAt = clock ? clock.endsAt : Math.max.apply(null, [0].concat(Array.from(cards.values()).map((c) => c.endsAt)));
    let pollTimer = null;
    let polling = false;
    let allEndedByServer = false;

    function eventOver() {
      return allEndedByServer || (eventEndsAt > 0 && serverNow() >= eventEndsAt);
    }

    function applyEvent(data) {
      if (!data || typeof data !== 'object') return;
      if (data.status === 'ended') cards.forEach((c) => { c.serverEnded = true; });
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

    everySecond(renderAll);
  }

  // ======================================================================
  // Login page
  // ======================================================================
  const AUTH_TEXT = {
    invalid_credentials: '用户名或密码错误',
    username_taken: '该用户名已被注册',
    invalid_username: '用户名不合法',
    weak_password: '密码强度不足',
    rate_limited: '操作太频繁，请稍后再试',
  };

  function initLogin() {
    let next = body.dataset.next || '/';
    if (next.charAt(0) !== '/' || next.charAt(1) === '/' || next.charAt(1) === '\\') next = '/';

    function authError(r, fallback) {
      const err = errorOf(r);
      const zh = AUTH_TEXT[err.code];
      if (zh && err.message) return zh + ' · ' + err.message;
      return zh || err.message || (fallback + ' (HTTP ' + r.status + ')');
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
          msg.textContent = '请输入用户名和密码 · Username and password are required';
          return;
        }
        const payload = JSON.stringify({ username: username, password: password });
        if (submit) { submit.disabled = true; submit.textContent = mode === 'register' ? '注册中…' : '登录中…'; }
        const done = (text) => {
          msg.textContent = text;
          if (submit) { submit.disabled = false; submit.innerHTML = submitText; }
        };
        try {
          if (mode === 'register') {
            const reg = await api('POST', '/api/v1/users', payload);
            if (!reg.ok) { done(authError(reg, '注册失败')); return; }
          }
          const r = await api('POST', '/api/v1/sessions', payload);
          if (!r.ok) { done(authError(r, '登录失败')); return; }
          window.location.assign(next);
        } catch (e) {
          done('网络异常，请重试 · Network error, please retry');
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
          if (row.timer) row.timer.textContent = '已超时 · Expired';
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
        if (row.msg) row.msg.textContent = err.message || ((action === 'pay' ? '支付失败' : '取消失败') + ' (HTTP ' + r.status + ')');
      } catch (e) {
        if (row.msg) row.msg.textContent = '网络异常，请重试 · Network error';
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

    if (rows.length) everySecond((now) => rows.forEach((row) => renderRow(row, now)));
  }

  const page = body.dataset.page;
  if (page === 'sale') initSale();
  else if (page === 'login') initLogin();
  else if (page === 'orders') initOrders();
})();
