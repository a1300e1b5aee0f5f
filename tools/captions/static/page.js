// voxweft live captions: browser side.
// Listens to the server's Server-Sent Events at /events (hello, utterance, actor, stats)
// and renders captions and pipeline health. Plain ES2020, no dependencies.
// All text from the server goes through textContent (never innerHTML).
'use strict';

(() => {
  const MAX_ROWS = 300;
  const STAGES = ['endpointing', 'asr', 'mt', 'tts', 'play'];
  const LAT_SCALE_S = 10;   // a full latency track is this many seconds
  const LAT_SLOW_S = 5;     // latency text turns amber above this
  const SPOKEN_WARN = 0.9;  // the share of speech spoken turns amber below this ...
  const SPOKEN_BAD = 0.75;  // ... and red below this
  const NEAR_BOTTOM_PX = 48;
  const RETRY_MIN_MS = 1000;
  const RETRY_MAX_MS = 30000;

  const $ = (id) => document.getElementById(id);
  const ui = {
    captions: $('captions'),
    actors: $('actors'),
    conn: $('conn'),
    stats: $('stats'),
    langs: $('langs'),
    title: $('title'),
    headSrc: $('head-src'),
    headTgt: $('head-tgt'),
    jump: $('jump'),
  };

  let srcLang = '';
  let tgtLang = '';
  let pageTitle = 'voxweft';
  const rows = new Map();    // utt id -> {row, src, tgt, tgtCell, lat, note, order, latKey}
  const actors = new Map();  // actor name -> {chip, state, restarts, queue}
  let maxOrder = 0;
  // A restarted server starts its own order over and knows none of the captions shown so
  // far: they stay, and its rows come after them.
  let session = null;
  let orderBase = 0;

  // ---------- small helpers ----------

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = text;
    return e;
  }

  function num(v) {
    if (typeof v === 'number') return Number.isFinite(v) ? v : null;
    if (typeof v === 'string' && v.trim() !== '') {
      const n = Number(v);
      return Number.isFinite(n) ? n : null;
    }
    return null;
  }

  function str(v) {
    return v == null ? '' : String(v);
  }

  function setText(node, text) {
    if (node.textContent !== text) node.textContent = text;
  }

  function setLang(node, lang) {
    if (lang) node.setAttribute('lang', lang);
    else node.removeAttribute('lang');
  }

  // ---------- scrolling: stick to the newest row unless the user scrolled up ----------

  let stick = true;
  let scrollQueued = false;
  let userIntentUntil = 0;
  let pointerDown = false;

  function atBottom() {
    const c = ui.captions;
    return c.scrollHeight - c.scrollTop - c.clientHeight <= NEAR_BOTTOM_PX;
  }

  function setStick(v) {
    stick = v;
    ui.jump.hidden = v;
  }

  // Only a scroll the user caused may turn auto-scroll off; scrolls caused by content
  // changes (trimming old rows, scroll anchoring) must not.
  const noteIntent = () => { userIntentUntil = performance.now() + 400; };
  ui.captions.addEventListener('wheel', noteIntent, { passive: true });
  ui.captions.addEventListener('touchstart', noteIntent, { passive: true });
  ui.captions.addEventListener('touchmove', noteIntent, { passive: true });
  ui.captions.addEventListener('keydown', noteIntent);
  document.addEventListener('keydown', (ev) => {
    if (['ArrowUp', 'ArrowDown', 'PageUp', 'PageDown', 'Home', 'End', ' '].includes(ev.key)) noteIntent();
  });
  ui.captions.addEventListener('pointerdown', () => { pointerDown = true; noteIntent(); });
  window.addEventListener('pointerup', () => { pointerDown = false; });
  window.addEventListener('pointercancel', () => { pointerDown = false; });

  ui.captions.addEventListener('scroll', () => {
    if (atBottom()) setStick(true);
    else if (pointerDown || performance.now() < userIntentUntil) setStick(false);
  }, { passive: true });

  function scheduleScroll() {
    if (scrollQueued) return;
    scrollQueued = true;
    requestAnimationFrame(() => {
      scrollQueued = false;
      if (stick) ui.captions.scrollTop = ui.captions.scrollHeight;
    });
  }

  ui.jump.addEventListener('click', () => {
    setStick(true);
    ui.captions.scrollTop = ui.captions.scrollHeight;
  });

  if (typeof ResizeObserver === 'function') {
    new ResizeObserver(() => { if (stick) scheduleScroll(); }).observe(ui.captions);
  } else {
    window.addEventListener('resize', () => { if (stick) scheduleScroll(); });
  }

  // ---------- hello ----------

  function setHead(node, lang, fallback) {
    node.textContent = lang ? lang.toUpperCase() : fallback;
    setLang(node, lang);
  }

  function onHello(d) {
    // The captions stay (a snapshot follows: it updates them in place); actors start over.
    if (d.session !== session) {
      session = d.session;
      orderBase = maxOrder;
    }
    actors.clear();
    ui.actors.replaceChildren();
    ui.stats.replaceChildren();

    srcLang = str(d.src_lang).trim();
    tgtLang = str(d.tgt_lang).trim();
    pageTitle = str(d.title).trim() || 'voxweft';

    ui.title.textContent = pageTitle;
    setHead(ui.headSrc, srcLang, 'Source');
    setHead(ui.headTgt, tgtLang, 'Translation');
    const pair = srcLang && tgtLang ? `${srcLang.toUpperCase()} → ${tgtLang.toUpperCase()}` : '';
    ui.langs.textContent = pair;
    document.title = pair ? `${pageTitle} · ${pair}` : pageTitle;

    if (Array.isArray(d.actors)) {
      for (const name of d.actors) {
        if (name != null && str(name) !== '') ensureActor(str(name));
      }
    }

    setStick(true);
    document.body.classList.add('ready');
  }

  // ---------- utterances ----------

  function rowOrder(node) {
    const n = Number(node.dataset.order);
    return Number.isFinite(n) ? n : 0;
  }

  // Put `row` among the rows sorted by ascending order (stable: after equal orders).
  function place(row, order) {
    const c = ui.captions;
    let prev = c.lastElementChild;
    while (prev && (prev === row || rowOrder(prev) > order)) prev = prev.previousElementSibling;
    const next = prev ? prev.nextElementSibling : c.firstElementChild;
    if (next !== row) c.insertBefore(row, next);
  }

  function trim() {
    const c = ui.captions;
    while (c.childElementCount > MAX_ROWS) {
      const first = c.firstElementChild;
      rows.delete(first.dataset.utt);
      first.remove();
    }
  }

  function makeRow(id) {
    const row = el('div', 'utt');
    row.dataset.utt = id;
    const srcCell = el('div', 'cell c-src');
    const src = el('div', 'src');
    srcCell.append(src);
    const tgtCell = el('div', 'cell c-tgt');
    const tgt = el('div', 'tgt');
    const lat = el('div', 'lat');
    tgtCell.append(tgt, lat);
    row.append(srcCell, tgtCell);
    return { row, src, tgt, tgtCell, lat, note: null, order: null, latKey: '' };
  }

  function notSpokenText(reason) {
    const r = reason.trim();
    if (/^\(?\s*not spoken/i.test(r)) return r.startsWith('(') ? r : `(${r})`;
    return `(not spoken: ${r})`;
  }

  function fmtS(v, digits) {
    return `${v.toFixed(digits)} s`;
  }

  function renderLat(r, latency, stages) {
    const st = stages && typeof stages === 'object' && !Array.isArray(stages) ? stages : {};
    const key = latency == null ? '' : JSON.stringify([latency, st]);
    if (key === r.latKey) return;
    r.latKey = key;
    const lat = r.lat;
    lat.replaceChildren();
    lat.classList.remove('slow', 'over');
    lat.removeAttribute('title');
    if (latency == null) return;

    const segs = [];
    for (const k of STAGES) {
      const v = num(st[k]);
      if (v != null && v > 0) segs.push([k, v]);
    }
    for (const k of Object.keys(st)) {
      if (STAGES.includes(k)) continue;
      const v = num(st[k]);
      if (v != null && v > 0) segs.push([k, v]);
    }
    const sum = segs.reduce((a, s) => a + s[1], 0);

    if (sum > 0) {
      const track = el('span', 'track');
      const bar = el('span', 'latbar');
      bar.style.width = `${Math.min(100, (sum / LAT_SCALE_S) * 100).toFixed(2)}%`;
      for (const [k, v] of segs) {
        const seg = el('span', 'seg');
        seg.dataset.stage = k;
        seg.style.width = `${((v / sum) * 100).toFixed(3)}%`;
        seg.title = `${k} ${fmtS(v, 2)}`;
        bar.append(seg);
      }
      track.append(bar);
      lat.append(track);
      if (sum > LAT_SCALE_S) lat.classList.add('over');
    }
    lat.append(el('span', 'lattxt', fmtS(latency, 1)));
    lat.title = `end of speech → first audio ${fmtS(latency, 2)}` +
      (segs.length ? `\n${segs.map(([k, v]) => `${k} ${fmtS(v, 2)}`).join(' · ')}` : '');
    if (latency > LAT_SLOW_S) lat.classList.add('slow');
  }

  function onUtterance(d) {
    if (d.utt == null || str(d.utt) === '') return;
    const id = str(d.utt);
    let r = rows.get(id);
    const isNew = !r;
    if (isNew) {
      r = makeRow(id);
      rows.set(id, r);
    }

    let order = num(d.order);
    order = order == null ? (r.order != null ? r.order : maxOrder) : orderBase + order;
    if (!isNew && r.order != null) order = r.order;   // a row keeps its place
    if (order > maxOrder) maxOrder = order;
    if (isNew || order !== r.order) {
      r.order = order;
      r.row.dataset.order = String(order);
      place(r.row, order);
    }

    const sourceFinal = d.source_final === true;
    const targetFinal = d.target_final === true;
    setText(r.src, str(d.source));
    setText(r.tgt, str(d.target));
    r.src.classList.toggle('draft', !sourceFinal);
    r.tgt.classList.toggle('draft', !targetFinal);
    setLang(r.src, srcLang);
    setLang(r.tgt, tgtLang);

    const notSpoken = str(d.not_spoken).trim();
    if (notSpoken) {
      if (!r.note) {
        r.note = el('span', 'note');
        r.tgt.after(r.note);
      }
      setText(r.note, notSpokenText(notSpoken));
    } else if (r.note) {
      r.note.remove();
      r.note = null;
    }

    // Speech the segmenter did not interpret (not the speaker's): a quiet line that says so.
    const ignored = str(d.ignored).trim();
    if (ignored) setText(r.src, `(${ignored})`);
    r.row.classList.toggle('ignored', ignored !== '');

    r.row.classList.toggle('final', sourceFinal && targetFinal);
    r.row.classList.toggle('spoken', d.spoken === true);
    r.row.classList.toggle('unspoken', notSpoken !== '');

    renderLat(r, num(d.latency_s), d.stages);

    if (isNew) trim();
    scheduleScroll();
  }

  // ---------- actors ----------

  function ensureActor(name) {
    let a = actors.get(name);
    if (a) return a;
    const chip = el('div', 'actor');
    chip.dataset.name = name;
    chip.dataset.state = 'unknown';
    chip.title = name;
    const dot = el('span', 'dot');
    dot.setAttribute('aria-hidden', 'true');
    const state = el('span', 'state', '…');
    const restarts = el('span', 'restarts');
    const queue = el('span', 'queue');
    chip.append(dot, el('span', 'name', name), state, restarts, queue);
    ui.actors.append(chip);
    a = { chip, state, restarts, queue };
    actors.set(name, a);
    return a;
  }

  function onActor(d) {
    const name = str(d.name);
    if (!name) return;
    const a = ensureActor(name);
    const state = str(d.state) || 'unknown';
    a.chip.dataset.state = state;
    setText(a.state, state);

    const restarts = num(d.restarts);
    setText(a.restarts, restarts != null && restarts > 0 ? `↻${restarts}` : '');
    const queue = num(d.queue);
    setText(a.queue, queue != null && queue > 0 ? `q${queue}` : '');

    const host = str(d.host);
    const detail = str(d.detail);
    const busy = num(d.busy_s);
    const lines = [host ? `${name} on ${host}` : name, `state: ${state}`];
    if (detail) lines.push(detail);
    if (restarts != null && restarts > 0) lines.push(`restarts: ${restarts}`);
    if (queue != null && queue > 0) lines.push(`queue: ${queue}`);
    if (busy != null && busy > 0) lines.push(`busy: ${fmtS(busy, 1)}`);
    a.chip.title = lines.join('\n');
  }

  // ---------- stats ----------

  function onStats(d) {
    const parts = [];
    const lag = num(d.lag_s);
    if (lag != null) {
      const s = el('span', 'lag', `voice ${lag.toFixed(1)} s behind`);
      if (lag > 30) s.classList.add('bad');
      else if (lag > 10) s.classList.add('warn');
      s.title = 'how far the spoken translation is behind the speaker';
      parts.push(s);
    }
    const share = num(d.spoken_share);
    if (share != null) {
      // Rounded down: "100 %" only when every word was spoken.
      const pct = Math.floor(share * 100 + 1e-9);
      const notSpoken = num(d.utterances_not_spoken) || 0;
      const known = notSpoken + (num(d.utterances_spoken) || 0);
      const ignoredS = num(d.ignored_s) || 0;
      const why = [];
      if (ignoredS) why.push(`${fmtS(ignoredS, 1)} ignored`);
      if (notSpoken) {
        why.push(`${notSpoken} of ${known} utterance${known === 1 ? '' : 's'} not spoken`);
      }
      let text = `spoken ${pct} % of the speech heard`;
      if (why.length) text += ` (${why.join('; ')})`;
      const s = el('span', 'spoken', text);
      if (share < SPOKEN_BAD) s.classList.add('bad');
      else if (share < SPOKEN_WARN) s.classList.add('warn');
      s.title = 'seconds of speech whose translation was spoken, of all the speech heard: ' +
        'speech ignored (not the speaker) and translations too late count against it';
      parts.push(s);
    }
    const ignored = num(d.ignored) || 0;
    if (ignored) {
      const s = el('span', 'ignored', `${ignored} ignored`);
      s.title = 'stretches of speech not interpreted: another voice, quieter than the speaker';
      parts.push(s);
    }
    const n = num(d.utterances);
    if (n != null) {
      parts.push(el('span', 'count', `${n} utterance${n === 1 ? '' : 's'}`));
    }
    const out = [];
    parts.forEach((p, i) => {
      if (i) out.push(document.createTextNode(' · '));
      out.push(p);
    });
    ui.stats.replaceChildren(...out);
  }

  // ---------- connection ----------

  let source = null;
  let retryTimer = 0;
  let retryMs = RETRY_MIN_MS;

  function setConn(open, text) {
    ui.conn.dataset.state = open ? 'open' : 'closed';
    ui.conn.textContent = text;
    document.body.classList.toggle('offline', !open);
  }

  function handler(fn) {
    return (ev) => {
      let d;
      try {
        d = JSON.parse(ev.data);
      } catch (err) {
        console.warn('captions: bad event data', ev.type, err);
        return;
      }
      if (d && typeof d === 'object' && !Array.isArray(d)) fn(d);
    };
  }

  function connect() {
    clearTimeout(retryTimer);
    retryTimer = 0;
    if (source) source.close();
    const es = new EventSource('/events' + location.search);
    source = es;
    es.onopen = () => {
      retryMs = RETRY_MIN_MS;
      setConn(true, 'connected');
    };
    es.onerror = () => {
      if (es !== source) return;
      if (es.readyState === EventSource.CLOSED) {
        // The browser gave up (e.g. an HTTP error status): retry ourselves, with backoff.
        es.close();
        source = null;
        setConn(false, 'disconnected, retrying…');
        retryTimer = setTimeout(connect, retryMs);
        retryMs = Math.min(retryMs * 2, RETRY_MAX_MS);
      } else {
        setConn(false, 'reconnecting…');
      }
    };
    es.addEventListener('hello', handler(onHello));
    es.addEventListener('utterance', handler(onUtterance));
    es.addEventListener('actor', handler(onActor));
    es.addEventListener('stats', handler(onStats));
  }

  // Close cleanly on navigation (avoids "connection interrupted" console noise) and
  // reconnect when the page comes back from the back/forward cache.
  window.addEventListener('pagehide', () => {
    clearTimeout(retryTimer);
    if (source) source.close();
    source = null;
  });
  window.addEventListener('pageshow', (ev) => {
    if (ev.persisted) connect();
  });

  // ---------- keep a phone screen awake while captions are shown (where allowed) ----------

  let wakeLock = null;
  async function keepAwake() {
    if (!('wakeLock' in navigator) || document.visibilityState !== 'visible' || wakeLock) return;
    try {
      wakeLock = await navigator.wakeLock.request('screen');
      wakeLock.addEventListener('release', () => { wakeLock = null; });
    } catch (_) {
      wakeLock = null;  // not allowed here (e.g. no secure context / battery saver): fine
    }
  }
  document.addEventListener('visibilitychange', keepAwake);
  document.addEventListener('click', keepAwake);  // some browsers want a user gesture

  connect();
  keepAwake();
})();
