// seckill console — the live dashboard. Plain ES2017, no library, no inline script (the CSP is
// `script-src 'self'`). Listens to the server-sent events of /admin/dashboard/stream, one
// snapshot a second, and redraws the tables, the buys/s sparkline and the per-product bars.
'use strict';

(function () {
  const root = document.getElementById('dash');
  if (!root || typeof EventSource === 'undefined') return;
  const SVG = 'http://www.w3.org/2000/svg';
  const WINDOW = 60; // seconds of buys/s in the sparkline
  const accepted = [];
  const refused = [];
  let last = null;

  const $ = (id) => document.getElementById(id);
  const status = $('dash-status');

  // A cell is a value, or [value, class] for a value to highlight.
  function cell(row, value) {
    const td = document.createElement('td');
    const [text, cls] = Array.isArray(value) ? value : [value, ''];
    td.textContent = String(text);
    if (cls) td.className = cls;
    row.appendChild(td);
  }

  function fill(tbody, rows, empty) {
    const next = document.createDocumentFragment();
    rows.forEach((values) => {
      const tr = document.createElement('tr');
      values.forEach((v) => cell(tr, v));
      next.appendChild(tr);
    });
    if (rows.length === 0 && empty) {
      const tr = document.createElement('tr');
      const td = document.createElement('td');
      td.colSpan = tbody.closest('table').querySelectorAll('th').length;
      td.textContent = empty;
      tr.appendChild(td);
      next.appendChild(tr);
    }
    tbody.replaceChildren(next);
  }

  function push(series, value) {
    series.push(value);
    if (series.length > WINDOW) series.shift();
  }

  function drawSpark() {
    const top = Math.max(1, ...accepted, ...refused);
    const step = 300 / (WINDOW - 1);
    [['.dash-line-accepted', accepted], ['.dash-line-refused', refused]].forEach(([sel, rates]) => {
      const offset = WINDOW - rates.length;
      const points = rates.map((r, i) =>
        ((offset + i) * step).toFixed(1) + ',' + (60 - (r / top) * 58 - 1).toFixed(1));
      $('dash-spark').querySelector(sel).setAttribute('points', points.join(' '));
    });
  }

  function drawBars(products) {
    const svg = $('dash-bars');
    const height = Math.max(10, products.length * 14);
    svg.setAttribute('viewBox', '0 0 300 ' + height);
    svg.setAttribute('height', String(height));
    const next = document.createDocumentFragment();
    products.forEach((p, i) => {
      const total = Math.max(1, p.stock_total);
      [['sold', p.sold], ['in-flight', p.in_flight], ['paid', p.paid]].forEach(([kind, units], k) => {
        const rect = document.createElementNS(SVG, 'rect');
        rect.setAttribute('class', 'dash-bar dash-bar-' + kind);
        rect.setAttribute('x', '0');
        rect.setAttribute('y', String(i * 14 + k * 4));
        rect.setAttribute('height', '4');
        rect.setAttribute('width', String(Math.max(0, (units / total) * 300)));
        const title = document.createElementNS(SVG, 'title');
        title.textContent = p.name + ': ' + units + ' ' + kind;
        rect.appendChild(title);
        next.appendChild(rect);
      });
    });
    svg.replaceChildren(next);
  }

  // Buys per second of each outcome since the last snapshot (none for the first). A server
  // that stopped takes its counts with it: a count that went down is no buy.
  function rates(snapshot) {
    if (!last || snapshot.at <= last.at) return null;
    const seconds = (snapshot.at - last.at) / 1000;
    const per = {};
    snapshot.buys.forEach(([outcome, count]) => {
      per[outcome] = Math.max(0, count - (last.counts[outcome] || 0)) / seconds;
    });
    return per;
  }

  function show(snapshot) {
    const per = rates(snapshot);
    if (per) {
      const acceptedRate = per.accepted || 0;
      const refusedRate = Object.keys(per)
        // A retry answered with its first order is neither accepted again nor refused.
        .filter((o) => o !== 'accepted' && o !== 'replayed')
        .reduce((sum, o) => sum + per[o], 0);
      push(accepted, acceptedRate);
      push(refused, refusedRate);
      $('dash-rate').textContent = acceptedRate.toFixed(1);
      $('dash-refused-rate').textContent = refusedRate.toFixed(1);
      drawSpark();
    }
    const counts = {};
    snapshot.buys.forEach(([outcome, count]) => { counts[outcome] = count; });
    last = { at: snapshot.at, counts: counts };
    $('dash-buys-from').textContent = snapshot.buys_from === 'all_servers'
      ? 'all servers (' + snapshot.servers + ')'
      : 'this server';
    fill($('dash-buys'), snapshot.buys.map(([outcome, count]) =>
      [outcome, count, per ? per[outcome].toFixed(1) : '–']));
    const off = (n) => [n, n !== 0 ? 'dash-off' : ''];
    fill($('dash-products'), snapshot.products.map((p) => [
      p.name, p.sold, p.remaining, p.in_flight, p.paid, p.stock_total, p.outbox, off(p.dead),
      p.drift === null ? '–' : off(p.drift),
    ]), 'No live or upcoming sales.');
    drawBars(snapshot.products);
    if (snapshot.queues === null) {
      fill($('dash-queues'), [], 'The queues could not be read.');
    } else {
      fill($('dash-queues'), snapshot.queues.map((q) => [q.name, q.messages]),
        'No message queues in this deployment.');
    }
  }

  const source = new EventSource(root.dataset.stream);
  source.addEventListener('snapshot', (e) => {
    try {
      show(JSON.parse(e.data));
      status.textContent = 'Live.';
    } catch (err) {
      status.textContent = 'Could not read an update.';
    }
  });
  source.addEventListener('unavailable', () => {
    status.textContent = 'The sale could not be read; trying again.';
  });
  source.addEventListener('ended', () => {
    source.close(); // reconnecting would only meet the sign-in form
    status.textContent = 'The session ended: sign in again to see the dashboard live.';
  });
  source.addEventListener('error', () => { status.textContent = 'Reconnecting…'; });
}());
