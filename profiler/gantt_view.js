// The drawing side of gantt.html: panels sharing one time view, zoom / pan clamped to the recording, phases
// inside boxes when zoomed in, and arrows to a clicked box's dependencies (gantt_page.js builds the page).
const LABEL_W = 64, AXIS_H = 22, PAD_R = 12, MIN_SPAN = 20;
const PHASE_MIN_PX = 40;  // a box this wide shows its phases (input, weights, ...) as a strip
const WAIT_ALPHA = 0.35;  // the waiting part of a box: its opcode colour, lighter
const view = { v0: 0, v1: FULL, smH: 10, minH: 6, plotW: 100, selected: null, pending: false, drag: null };

function clampView() {  // never pan or zoom past the recording: the view stays inside [0, FULL]
  const span = Math.min(FULL, Math.max(MIN_SPAN, view.v1 - view.v0));
  view.v0 = Math.min(Math.max(0, view.v0), FULL - span);
  view.v1 = view.v0 + span;
}

function sizeCanvas(c, ctx, w, h) {
  const dpr = window.devicePixelRatio || 1;
  c.width = Math.floor(w * dpr); c.height = Math.floor(h * dpr);
  c.style.width = w + "px"; c.style.height = h + "px";
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
}
function layout() {
  const w = document.documentElement.clientWidth, bands = PANELS.reduce((a, P) => a + P.M, 0);
  const top = document.getElementById("panels").getBoundingClientRect().top + window.scrollY;
  const avail = window.innerHeight - top - PANELS.length * (AXIS_H + 24) - 6;
  const lanes = Math.max(...PANELS.map(P => P.MAX_LANES));
  view.smH = Math.max(view.minH, 2 * lanes, Math.min(28, Math.floor(avail / Math.max(bands, 1))));
  view.plotW = Math.max(50, w - LABEL_W - PAD_R);
  for (const P of PANELS) {
    sizeCanvas(P.axis, P.actx, w, AXIS_H);
    sizeCanvas(P.cv, P.ctx, w, P.M * view.smH + 4);
  }
  draw();
}
function redraw() {
  if (!view.pending) { view.pending = true; requestAnimationFrame(() => { view.pending = false; draw(); }); }
}

function ticks() {
  const target = (view.v1 - view.v0) / (view.plotW / 110), p = Math.pow(10, Math.floor(Math.log10(target)));
  const step = [1, 2, 5, 10].map(m => m * p).find(s => s >= target), out = [];
  for (let t = Math.ceil(view.v0 / step) * step; t <= view.v1; t += step) out.push(t);
  return out;
}
function rowGeom(P, r) {  // y and height of display row r inside its SM band
  const m = P.ORD[r], laneH = (view.smH - 2) / (P.FIRST[m + 1] - P.FIRST[m]);
  return { y: m * view.smH + 1 + (r - P.FIRST[m]) * laneH, h: Math.max(1, laneH - (laneH >= 4 ? 1 : 0)) };
}

function draw() {
  const t = performance.now(), ts = ticks(), sc = view.plotW / (view.v1 - view.v0);
  for (const P of PANELS) drawPanel(P, ts, sc);
  document.getElementById("view").textContent = `view ${fmtNs(view.v0)} – ${fmtNs(view.v1)} of ${fmtNs(FULL)} · ` +
    PANELS.map(P => `${P.S.length} instructions on ${P.M} SMs (${P.R} lanes)`).join(" | ");
  for (const P of PANELS) P.cv.dataset.drawMs = (performance.now() - t).toFixed(1);  // read by the browser tests
}

function drawPanel(P, ts, sc) {
  const ctx = P.ctx, a = P.actx, w = LABEL_W + view.plotW + PAD_R, h = P.M * view.smH + 4, xEnd = LABEL_W + view.plotW;
  const { v0, v1, smH } = view;
  a.fillStyle = "#fff"; a.fillRect(0, 0, w, AXIS_H); a.font = "11px sans-serif"; a.textBaseline = "middle";
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, w, h);
  for (let m = 1; m < P.M; m += 2) { ctx.fillStyle = "#f1f1f1"; ctx.fillRect(LABEL_W, m * smH, view.plotW, smH); }
  for (const t of ts) {
    const x = LABEL_W + (t - v0) * sc, label = fmtTick(t);
    ctx.fillStyle = "#e4e4e4"; ctx.fillRect(Math.round(x), 0, 1, h);
    if (x + 3 + a.measureText(label).width <= w) { a.fillStyle = "#444"; a.fillText(label, x + 3, AXIS_H / 2); }
  }
  ctx.font = "11px sans-serif"; ctx.textBaseline = "middle";
  const labelEvery = Math.ceil(11 / smH);
  for (let m = 0; m < P.M; m += labelEvery) {
    ctx.fillStyle = "#333"; ctx.fillText(`SM ${String(P.d.row_sm[P.FIRST[m]]).padStart(3, "0")}`, 4, (m + 0.5) * smH);
  }
  // One path per colour and kind: far fewer state changes than a fillRect per box.
  const work = P.d.ops.map(() => new Path2D()), wait = P.d.ops.map(() => new Path2D());
  const phase = PHASE_COLORS.map(() => new Path2D()), tick = new Path2D();
  let phases = 0;
  for (let r = 0; r < P.R; r++) {
    const { y, h: barH } = rowGeom(P, r);
    // Spans in a row never overlap, so ends are sorted too: binary-search the first visible one.
    let lo = P.RS[r], hi = P.RS[r + 1];
    const end = hi;
    while (lo < hi) { const m = (lo + hi) >> 1; if (P.E[m] <= v0) lo = m + 1; else hi = m; }
    let lastPx = -1;  // painted up to this pixel column: sub-pixel spans merge into it
    for (let j = lo; j < end && P.S[j] < v1; j++) {
      const op = P.OP[j];
      if (P.hidden[op]) continue;
      const x0 = Math.max(LABEL_W, LABEL_W + (P.S[j] - v0) * sc), x1 = Math.min(xEnd, LABEL_W + (P.E[j] - v0) * sc);
      if (x1 - x0 >= 4) {
        const xr = Math.min(x1 - 1, Math.max(x0, LABEL_W + (P.S[j] + P.WAIT[j] - v0) * sc));
        if (xr > x0) wait[op].rect(x0, y, xr - x0, barH);
        if (x1 - 1 > xr) work[op].rect(xr, y, x1 - 1 - xr, barH);
        if (P.MK && x1 - x0 >= PHASE_MIN_PX && barH >= 3) phases += addPhases(P, j, phase, tick, y, barH, sc, xEnd);
        lastPx = Math.ceil(x1); continue;
      }
      let p0 = Math.floor(x0); const p1 = Math.max(p0 + 1, Math.ceil(x1));
      if (p1 <= lastPx) continue;
      if (p0 < lastPx) p0 = lastPx;
      work[op].rect(p0, y, p1 - p0, barH); lastPx = p1;
    }
  }
  ctx.globalAlpha = WAIT_ALPHA;
  wait.forEach((path, k) => { ctx.fillStyle = P.d.ops[k].color; ctx.fill(path); });
  ctx.globalAlpha = 1;
  work.forEach((path, k) => { ctx.fillStyle = P.d.ops[k].color; ctx.fill(path); });
  phase.forEach((path, k) => { ctx.fillStyle = PHASE_COLORS[k]; ctx.fill(path); });
  ctx.fillStyle = "#000"; ctx.fill(tick);
  ctx.fillStyle = "#999"; ctx.fillRect(LABEL_W - 1, 0, 1, P.M * smH);
  P.cv.dataset.phaseSegments = phases;
  P.cv.dataset.arrows = drawArrows(P, sc, h);
}

// The phases of span j as a strip along the bottom of its work part, plus a tick at its first weight page.
function addPhases(P, j, phase, tick, y, barH, sc, xEnd) {
  const b = segmentBounds(P, j), x = t => Math.min(xEnd, Math.max(LABEL_W, LABEL_W + (t - view.v0) * sc));
  const sh = Math.max(2, Math.round(barH / 2)), sy = y + barH - sh;  // the top keeps the opcode colour
  let n = 0;
  for (let k = 0; k < P.NSEG; k++) {
    if (isNaN(b[k]) || isNaN(b[k + 1]) || b[k + 1] <= b[k]) continue;
    const xa = x(b[k]), xb = x(b[k + 1]);
    if (xb - xa >= 1) { phase[k].rect(xa, sy, xb - xa, sh); n++; }
  }
  const f = firstPageTick(P, j);
  if (!isNaN(f)) tick.rect(x(f), y, 1, barH);
  return n;
}

function drawArrows(P, sc, h) {
  const sel = view.selected;
  if (!sel || sel.P !== P) return 0;
  const ctx = P.ctx, j = sel.j, deps = dependenciesOf(P, j), x = t => LABEL_W + (t - view.v0) * sc;
  const mid = k => { const g = rowGeom(P, P.ROW[k]); return g.y + g.h / 2; };
  ctx.save();
  ctx.beginPath(); ctx.rect(LABEL_W, 0, view.plotW, h); ctx.clip();
  const g = rowGeom(P, P.ROW[j]);
  ctx.strokeStyle = "#d50000"; ctx.lineWidth = 2;
  ctx.strokeRect(x(P.S[j]), g.y, Math.max(2, x(P.E[j]) - x(P.S[j])), g.h);
  const tx = x(P.S[j] + P.WAIT[j]), ty = mid(j);
  for (const pass of [false, true]) {  // the releasing producers last, on top
    ctx.strokeStyle = ctx.fillStyle = pass ? "#000" : "rgba(0,0,0,0.3)"; ctx.lineWidth = pass ? 1.5 : 1;
    for (const k of deps.all) {
      if (deps.critical.has(k) !== pass) continue;
      const fx = x(P.E[k]), fy = mid(k), ang = Math.atan2(ty - fy, tx - fx);
      ctx.beginPath(); ctx.moveTo(fx, fy); ctx.lineTo(tx, ty); ctx.stroke();
      ctx.beginPath(); ctx.moveTo(tx, ty);
      ctx.lineTo(tx - 7 * Math.cos(ang - 0.4), ty - 7 * Math.sin(ang - 0.4));
      ctx.lineTo(tx - 7 * Math.cos(ang + 0.4), ty - 7 * Math.sin(ang + 0.4)); ctx.fill();
    }
  }
  ctx.restore();
  return deps.all.length;
}

function spanAt(P, mx, my) {
  const m = Math.floor(my / view.smH);
  if (m < 0 || m >= P.M || mx < LABEL_W) return -1;
  const lanes = P.FIRST[m + 1] - P.FIRST[m], laneH = (view.smH - 2) / lanes;
  const r = P.FIRST[m] + Math.min(lanes - 1, Math.max(0, Math.floor((my - m * view.smH - 1) / laneH)));
  const sc = view.plotW / (view.v1 - view.v0), t = view.v0 + (mx - LABEL_W) / sc, slack = 3 / sc;
  let a = P.RS[r], b = P.RS[r + 1];
  while (a < b) { const k = (a + b) >> 1; if (P.E[k] < t - slack) a = k + 1; else b = k; }
  for (; a < P.RS[r + 1] && P.S[a] <= t + slack; a++) if (!P.hidden[P.OP[a]]) return a;
  return -1;
}

for (const P of PANELS) {
  P.cv.addEventListener("wheel", ev => {
    ev.preventDefault();
    const span0 = view.v1 - view.v0, t = view.v0 + Math.max(0, ev.offsetX - LABEL_W) * span0 / view.plotW;
    const f = Math.exp(Math.max(-1, Math.min(1, ev.deltaY * 0.002)));
    const span = Math.min(FULL, Math.max(MIN_SPAN, span0 * f));
    view.v0 = t - (t - view.v0) / span0 * span; view.v1 = view.v0 + span; clampView(); redraw();
  }, { passive: false });
  P.cv.addEventListener("mousedown", ev => {
    view.drag = { P, x: ev.clientX, ox: ev.offsetX, oy: ev.offsetY, v0: view.v0, v1: view.v1, moved: false };
    tip.style.display = "none";
  });
  P.cv.addEventListener("dblclick", () => { view.v0 = 0; view.v1 = FULL; redraw(); });
}
window.addEventListener("mouseup", () => {
  const d = view.drag;
  view.drag = null;
  if (!d || d.moved) return;
  const j = spanAt(d.P, d.ox, d.oy);  // a click, not a drag: select that box (or clear on empty space)
  view.selected = j < 0 ? null : { P: d.P, j };
  redraw();
});
window.addEventListener("mousemove", ev => {
  const d = view.drag;
  if (d) {
    if (Math.abs(ev.clientX - d.x) > 3) d.moved = true;
    if (!d.moved) return;
    const dt = (ev.clientX - d.x) * (d.v1 - d.v0) / view.plotW;
    view.v0 = d.v0 - dt; view.v1 = d.v1 - dt; clampView(); redraw(); return;
  }
  const P = PANELS.find(Q => Q.cv === ev.target);
  const j = P ? spanAt(P, ev.offsetX, ev.offsetY) : -1;
  if (j < 0) { tip.style.display = "none"; return; }
  tip.textContent = describe(P, j); tip.style.display = "block";
  const tx = ev.clientX + 14 + tip.offsetWidth > window.innerWidth ? ev.clientX - tip.offsetWidth - 10 : ev.clientX + 14;
  tip.style.left = tx + "px"; tip.style.top = (ev.clientY + 14) + "px";
});
window.addEventListener("resize", layout);
window.addEventListener("keydown", ev => {  // taller rows show the phases inside boxes more clearly
  if (ev.key !== "+" && ev.key !== "-") return;
  view.minH = Math.max(6, Math.min(40, view.minH + (ev.key === "+" ? 4 : -4))); layout();
});
// What the headless-browser tests drive and read (tests/profiler/test_profile_browser.py).
window.GANTT = { PANELS, view, FULL, LABEL_W, rowGeom, draw, tip };
layout();
