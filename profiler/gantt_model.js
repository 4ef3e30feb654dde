// The data side of gantt.html: each panel's columns decoded, what a span waited for, and the hover text.
// gantt_view.js draws the panels and handles input; profiler/gantt_data.py writes the data.
const DATA = JSON.parse(document.getElementById("data").textContent);

function column(b64, T) {  // little-endian typed array shipped as base64
  const s = atob(b64), u = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i);
  return new T(u.buffer);
}

function makePanel(d) {
  const P = {
    d, S: column(d.start, Float64Array), E: column(d.end, Float64Array), OP: column(d.op, Int32Array),
    IDX: column(d.index, Int32Array), WAIT: column(d.wait, Float64Array), BYTES: column(d.bytes, Float64Array),
    OPND: column(d.operands, Int32Array), RS: column(d.row_start, Int32Array), R: d.rows.length,
    K: d.num_operands, NSEG: d.segments.length, MK: d.marks ? column(d.marks, Float32Array) : null,
    hidden: new Uint8Array(d.ops.length),  // per legend slot: 1 = turned off in the legend
  };
  const n = P.S.length;
  P.POS = new Int32Array(n);  // record index -> span position (dependencies are in record order)
  for (let j = 0; j < n; j++) P.POS[P.IDX[j]] = j;
  P.ROW = new Int32Array(n);  // span position -> display row
  for (let r = 0; r < P.R; r++) P.ROW.fill(r, P.RS[r], P.RS[r + 1]);
  // One band per SM; an SM's sub-lanes (pipelined, overlapping instructions) split its band.
  P.ORD = new Int32Array(P.R); P.FIRST = [];  // row -> SM band; band -> its first row
  for (let r = 0; r < P.R; r++) {
    if (r === 0 || d.row_sm[r] !== d.row_sm[r - 1]) P.FIRST.push(r);
    P.ORD[r] = P.FIRST.length - 1;
  }
  P.M = P.FIRST.length;
  P.FIRST.push(P.R);
  P.MAX_LANES = Math.max(1, ...d.row_lane.map(l => l + 1));
  if (d.deps) {
    P.GP = column(d.deps.group_ptr, Int32Array); P.GM = column(d.deps.group_members, Int32Array);
    P.WP = column(d.deps.wait_ptr, Int32Array); P.WG = column(d.deps.wait_group, Int32Array);
    P.WC = column(d.deps.wait_count, Int32Array);
  }
  return P;
}

// Span positions that span j waited for; `critical` holds, per wait, the one whose signal released it.
function dependenciesOf(P, j) {
  if (!P.WP) return { all: [], critical: new Set() };
  const i = P.IDX[j], all = new Set(), critical = new Set();
  for (let k = P.WP[i]; k < P.WP[i + 1]; k++) {
    const a = P.GP[P.WG[k]], c = P.WC[k];
    for (let m = a; m < a + c; m++) all.add(P.POS[P.GM[m]]);
    critical.add(P.POS[P.GM[a + c - 1]]);
  }
  return { all: [...all], critical };
}

// Bounds of span j's drawn segments (ready, the marks, end); NaN where a mark was not reached.
function segmentBounds(P, j) {
  const b = [P.S[j] + P.WAIT[j]];
  for (let k = 0; k < P.NSEG - 1; k++) b.push(P.MK[j * (P.NSEG) + k]);
  b.push(P.E[j]);
  return b;
}
function firstPageTick(P, j) { return P.MK[j * P.NSEG + P.NSEG - 1]; }

function fmtNs(ns) {
  const a = Math.abs(ns);
  if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
  if (a >= 1e3) return (ns / 1e3).toFixed(3) + " µs";
  return ns.toFixed(0) + " ns";
}
function fmtTick(ns) {  // axis labels: same units, trailing zeros dropped
  const a = Math.abs(ns), [d, u] = a >= 1e6 ? [1e6, "ms"] : a >= 1e3 ? [1e3, "µs"] : [1, "ns"];
  return `${+(ns / d).toFixed(3)} ${u}`;
}
function fmtBytes(b) {
  if (b >= 1e9) return (b / 1e9).toFixed(2) + " GB";
  if (b >= 1e6) return (b / 1e6).toFixed(2) + " MB";
  if (b >= 1e3) return (b / 1e3).toFixed(1) + " kB";
  return b + " B";
}

function describe(P, j) {
  const op = P.d.ops[P.OP[j]], names = op.operands, parts = [];
  for (let k = 0; k < names.length && k < P.K; k++) parts.push(`${names[k]}=${P.OPND[j * P.K + k]}`);
  let text = `${op.name}\n${P.d.rows[P.ROW[j]]} · instr #${P.IDX[j]}\n` +
    `start ${fmtNs(P.S[j])}  end ${fmtNs(P.E[j])}  dur ${fmtNs(P.E[j] - P.S[j])}\n` +
    `waiting ${fmtNs(P.WAIT[j])} on dependencies, then work ${fmtNs(P.E[j] - P.S[j] - P.WAIT[j])}` +
    (P.BYTES[j] > 0 ? ` · moved ${fmtBytes(P.BYTES[j])}` : "");
  if (P.MK) {
    const b = segmentBounds(P, j), seg = [];
    for (let k = 0; k < P.NSEG; k++) {
      if (!isNaN(b[k]) && !isNaN(b[k + 1])) seg.push(`${P.d.segments[k]} ${fmtNs(b[k + 1] - b[k])}`);
    }
    if (seg.length) text += "\n" + seg.join(" · ");
  }
  const deps = dependenciesOf(P, j);
  if (deps.all.length) {
    const last = [...deps.critical].sort((a, b) => P.E[b] - P.E[a])[0];
    text += `\nwaited for ${deps.all.length} instr; released by #${P.IDX[last]} ` +
      `${P.d.ops[P.OP[last]].name} (${P.d.rows[P.ROW[last]]}, ended ${fmtNs(P.E[last])})`;
  }
  return text + (parts.length ? "\n" + parts.join("  ") : "");
}
