// The page around the charts: title and banner, the legend (click: hide / show an opcode), the keys to wait,
// work, phases and arrows, and one title + sticky time axis + chart canvas per panel. gantt_view.js draws.
const PANELS = DATA.panels.map(makePanel);
const FULL = Math.max(1, ...PANELS.map(P => P.d.makespan));
const PHASE_COLORS = ["#fff176", "#4fc3f7", "#81c784", "#ba68c8", "#37474f"];  // legend and drawing
const tip = document.getElementById("tip");

const anySimulated = PANELS.some(P => P.d.simulated);
document.title = DATA.title + (anySimulated ? " (SIMULATED)" : "");
document.getElementById("title").textContent = DATA.title + (anySimulated ? " (simulated)" : "");
document.getElementById("meta").textContent = PANELS.length === 1 ? PANELS[0].d.meta : "";
if (anySimulated) document.getElementById("banner").style.display = "block";

function swatch(color, cls) {
  const i = document.createElement("i");
  i.style.background = color;
  if (cls) i.className = cls;
  return i;
}
// Legend: one entry per opcode name over all panels (DOM nodes, not innerHTML: names are data).
const legendOps = new Map();
for (const P of PANELS) {
  for (const o of P.d.ops) {
    if (o.count === 0) continue;
    const e = legendOps.get(o.name) || { color: o.color, count: 0 };
    e.count += o.count; legendOps.set(o.name, e);
  }
}
for (const [name, e] of legendOps) {
  const item = document.createElement("span");
  item.append(swatch(e.color), `${name} (${e.count})`);
  item.dataset.op = name; item.title = "click: hide / show";
  item.addEventListener("click", () => {
    item.classList.toggle("off");
    const off = item.classList.contains("off");
    for (const P of PANELS) P.d.ops.forEach((o, k) => { if (o.name === name) P.hidden[k] = off ? 1 : 0; });
    redraw();
  });
  document.getElementById("legend").append(item);
}
const keys = document.getElementById("keys"), key = (...nodes) => {
  const s = document.createElement("span"); s.append(...nodes); keys.append(s);
};
const firstColor = legendOps.size ? legendOps.values().next().value.color : "#888";
key(swatch(firstColor, "wait"), "lighter part: waiting on dependencies");
key(swatch(firstColor), "full colour: work");
if (PANELS.some(P => P.MK)) {
  PANELS.find(P => P.MK).d.segments.forEach((name, k) => key(swatch(PHASE_COLORS[k]), `phase: ${name}`));
}
if (PANELS.some(P => P.WP)) key("→ arrows: what a clicked box waited for (dark: the one that released it)");

for (const [k, P] of PANELS.entries()) {  // per panel: title, sticky axis, chart
  const box = document.createElement("div");
  if (P.d.label) {
    const t = document.createElement("div"), m = document.createElement("span");
    t.className = "ptitle"; t.textContent = P.d.label; m.textContent = P.d.meta; t.append(m); box.append(t);
  }
  P.axis = document.createElement("canvas"); P.axis.className = "axis";
  P.cv = document.createElement("canvas"); P.cv.className = "cv"; P.cv.dataset.panel = k;
  P.ctx = P.cv.getContext("2d"); P.actx = P.axis.getContext("2d");
  box.append(P.axis, P.cv); document.getElementById("panels").append(box);
}

