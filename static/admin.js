// seckill console — the live dashboard. Plain ES2017, no library, no inline script (the CSP is
// `script-src 'self'`). Listens to the server-sent events of /admin/dashboard/stream, one
// snapshot a second, and redraws the tables, the buys/s sparkline and the per-product bars.
'use strict';

(function () {
  const root = document.getElementById('dash');
  if (!root || typeof EventSource === 'undefined') return;
  const SVG = 'http://www.w3.org/2000/svg';
  const WINDOW = 60; // seconds of buys/s in the sparkline
  const rates = [];
  let last = null;

  const $ = (id) => document.getElementById(id);
  const status = $('dash-status');

  function cell(row, text) {
    const td = document.createElement('td');
    td.textContent = String(text);
    row.appendChild(td);
  }

  function fill(tbody, rows) {
    const next = document.createDocumentFragment();
    rows.forEach((values) => {
      const tr = document.createElement('tr');
      values.forEach((v) => cell(tr, v));
      next.appendChild(tr);
    });
    tbody.replaceChildren(next);
  }

  function drawSpark() {
    const line = $('dash-spark').querySelector('polyline');
    const top = Math.max(1, ...rates);
    const step = 300 / (WINDOW - 1);
    const offset = WINDOW - rates.length;
    const points = rates.map((r, i) =>
      ((offset + i) * step).toFixed(1) + ',' + (60 - (r / top) * 58 - 1).toFixed(1));
    line.setAttribute('points', points.join(' '));
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

  function show(snapshot) {
    const accepted = (snapshot.buys.find((b) => b[0] === 'accepted') || [0, 0])[1];
    if (last && snapshot.at > last.at) {
      const rate = Math.max(0, accepted - last.accepted) / ((snapshot.at - last.at) / 1000);
      rates.push(rate);
      if (rates.length > WINDOW) rates.shift();
      $('dash-rate').textContent = rate.toFixed(1);
      drawSpark();
    }
    last = { at: snapshot.at, accepted: accepted };
    fill($('dash-buys'), snapshot.buys);
    fill($('dash-products'), snapshot.products.map((p) =>
      [p.name, p.sold, p.remaining, p.in_flight, p.paid, p.stock_total]));
    drawBars(snapshot.products);
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
  source.addEventListener('error', () => { status.textContent = 'Reconnecting…'; });
}());
