// torchleak's live notebook view (anywidget). Plain ES module, no dependencies: the report
// arrives as the `report` trait (torchleak.report/1), progress as `progress`.

const NS = "http://www.w3.org/2000/svg";

// The one byte formatter of the front end, for numbers the JSON carries raw; it matches the
// core's formatBytes and torchleak.render.format.format_bytes (tests/python/test_render.py
// runs all three). Sentences the core knows arrive as text: site.text, projection_text,
// summary.headline, summary.empty_text.
export function formatBytes(n) {
  n = Number(n || 0);
  const sign = n < 0 ? "-" : "";
  n = Math.abs(n);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) { n /= 1024; u += 1; }
  return sign + (u === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[u];
}

// A saved report is untrusted input: any notebook can carry any JSON under our MIME type, and
// a view that throws blanks every output after it in JupyterLab. Each field the view reads is
// checked against this shape once, before drawing; what does not fit is dropped and named, and
// the rest is drawn. A string is a primitive, [x] a list of x, {...} an object of those fields.
const SITE = { text: "string", function: "string", cell: "number", line: "number", source: "string" };
const FINDING = {
  verdict: "string", device: "string", site: SITE, bytes_per_iteration: "number",
  total_bytes: "number", path_text: "string", path_short: "string", suggestion: "string",
  fix_code: "string", tensor_text: "string", allocated_inside: SITE, compiled_op: { text: "string" },
  rate_text: "string", ranks_text: "string", role: "string", growth_since: { text: "string", iteration: "number" },
  holder: { path_text: "string", path_short: "string", growth_per_iteration: "number" },
  path: [{ label: "string", kind: "string", type: "string", note: "string",
           tensor: { text: "string" } }],
  stack: [{ text: "string", function: "string", source: "string", user: "boolean" }],
};
const REPORT = {
  iterations: "number", iteration_unit: "string", boundary: "string",
  series_iterations: ["number"], warnings: ["string"],
  summary: { headline: "string", empty_text: "string" },
  sampling: { text: "string" },
  ranks: { world_size: "number", ranks: [{ text: "string" }], skew_text: ["string"] },
  oom: { text: "string", roles_text: "string", by_holder: [{ holder: "string", size_text: "string" }],
         by_site: [{ site: "string", size_text: "string" }] },
  causes: [{ text: "string", severity: "string", suggestion: "string", findings: ["number"] }],
  cause_groups: [{ text: "string", severity: "string", container: "string", causes: ["number"], fix_code: "string" }],
  devices: [{ device: "string", text: "string", allocated: ["number"], reserved: ["number"],
              peak: ["number"], leak_bytes_per_iteration: "number", roles_text: "string",
              allocated_trend_per_iteration: "number",
              roles: [{ role: "string", label: "string", at_peak: ["number"], leaks: "boolean" }],
              spikes: [{ text: "string" }] }],
  findings: [FINDING],
};

// The shapes above are the view's reading list; what a report carries that the view does not
// draw is named here, so that a field the core adds is a decision (tests/python/test_render.py
// holds both lists to a live report's keys): the series behind the chart the view fits itself,
// the raw numbers whose sentences it shows, and what only the memory viewer's export reads.
export const FIELDS_READ = { report: REPORT, finding: FINDING };
export const NOT_SHOWN = {
  report: ["schema_version", "torch_version", "python_version", "warmup", "events_recorded",
           "sampling_bytes", "job_id"],
  finding: ["autograd_node", "block_label", "confidence", "count", "dtype", "shape", "fix", "fix_rule", "live_blocks",
            "live_blocks_unlisted", "live_bytes_unlisted", "released_periodically", "retention",
            // its line is quoted in the suggestion the view shows
            "holder_read",
            "ranks", "series", "severity", "trend"],
};

function kindOf(value) {
  if (value === null || value === undefined) return "absent";
  if (Array.isArray(value)) return "a list";
  if (typeof value === "number") return Number.isFinite(value) ? "a number" : "not a finite number";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}

// Absent (null or missing) is never a problem: older and redacted reports leave fields out.
export function conform(value, shape, where, problems) {
  if (value === null || value === undefined) return undefined;
  const bad = (wanted) => { problems.push(`${where} is ${kindOf(value)}, not ${wanted}`); return undefined; };
  if (typeof shape === "string") {
    if (shape === "number") return typeof value === "number" && Number.isFinite(value) ? value : bad("a number");
    return typeof value === shape ? value : bad(`a ${shape}`);
  }
  if (Array.isArray(shape)) {
    if (!Array.isArray(value)) return bad("a list");
    const out = [];
    for (let i = 0; i < value.length; i++) {
      const item = conform(value[i], shape[0], `${where}[${i}]`, problems);
      if (item !== undefined) out.push(item);
    }
    return out;
  }
  if (typeof value !== "object" || Array.isArray(value)) return bad("an object");
  const out = {};
  for (const [key, inner] of Object.entries(shape)) {
    const item = conform(value[key], inner, where ? `${where}.${key}` : key, problems);
    if (item !== undefined) out[key] = item;
  }
  return out;
}

// The report as the view may read it, and one line naming what was dropped (at most five
// places, then a count: a 400,000-point curve of strings is one sentence, not a page).
export function checkReport(raw) {
  const problems = [];
  const report = raw === null || raw === undefined ? {} : conform(raw, REPORT, "", problems);
  if (report === undefined) return { report: {}, problem: "this report is not a JSON object: nothing to draw" };
  if (!problems.length) return { report, problem: "" };
  const shown = problems.slice(0, 5).join("; ");
  const more = problems.length > 5 ? `; and ${problems.length - 5} more` : "";
  return { report, problem: `this report is malformed, drawn without what does not fit: ${shown}${more}` };
}

// The largest value of some lists, without spreading them into arguments (a long run's curve
// would exceed the engine's argument limit).
function largest(lists, floor) {
  let top = floor;
  for (const list of lists) for (const v of list) if (v > top) top = v;
  return top;
}

function siteText(site) {
  return (site && site.text) || "<unknown>";
}

// Controls and the bidirectional and invisible format characters a name can carry are shown as
// their escapes, as in every other view (render/format.py's UNSEEN): U+202E would show a site or
// a holder reversed, an ESC or a NUL would be invisible. Tab and newline are layout.
const UNSEEN = [[0x00, 0x08], [0x0b, 0x1f], [0x7f, 0x9f], [0x61c, 0x61c], [0x200b, 0x200f],
                [0x2028, 0x202e], [0x2060, 0x2064], [0x2066, 0x2069], [0xfeff, 0xfeff]];

export function visible(text) {
  let out = "";
  for (const c of String(text)) {
    const code = c.codePointAt(0);
    if (UNSEEN.some(([lo, hi]) => code >= lo && code <= hi)) {
      out += code < 0x100 ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
    } else {
      out += c;
    }
  }
  return out;
}

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, visible(v));
  if (text !== undefined) node.textContent = visible(text);
  return node;
}

function svgEl(tag, attrs = {}) {
  const node = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

// Min/max per bucket keeps spikes when a long run is drawn in a few hundred pixels.
export function downsample(values, buckets) {
  if (values.length <= buckets * 2) return values.map((v, i) => [i, v]);
  const out = [];
  const size = values.length / buckets;
  for (let b = 0; b < buckets; b++) {
    const from = Math.floor(b * size), to = Math.floor((b + 1) * size);
    let lo = from, hi = from;
    for (let i = from; i < to; i++) {
      if (values[i] < values[lo]) lo = i;
      if (values[i] > values[hi]) hi = i;
    }
    for (const i of lo < hi ? [lo, hi] : [hi, lo]) out.push([i, values[i]]);
  }
  return out;
}

// Scales with its container (a split view, a narrow output): the viewBox is fixed and the
// element takes the width it is given.
// A long run's history is a thinned grid: `seriesIterations` gives each point's iteration
// (absent when every boundary was kept, point i being iteration i).
// `noun` is the core's word for an iteration (report.iteration_unit). `rateIsPerCellRun`: the
// leak's rate is per run of the leaking cell while the curve has a point per run of any cell.
// `onset`: the iteration the device's earliest leak began (its growth_since), where the trend
// starts: a late leak drawn from iteration 1 contradicted its own "leaking since".
function drawCurve(device, leakRate, iterations, noun, seriesIterations, rateIsPerCellRun, onset = 0) {
  const alloc = device.allocated || [];
  const reserved = device.reserved || [];
  const peak = device.peak || [];
  const showPeak = peak.length && peak.some((v, i) => v > (alloc[i] || 0));
  const showReserved = reserved.length && reserved.some((v, i) => v !== alloc[i]);
  const showTrend = leakRate > 0 && alloc.length > 1;
  const legend = [["alloc", "allocated"]];
  if (showPeak) legend.push(["peak", "peak within the iteration"]);
  if (showReserved) legend.push(["reserved", "reserved"]);
  if (showTrend) legend.push(["trend", `leak trend, ${formatBytes(leakRate)} per ${noun}`]);
  // The legend has rows of its own above the plot: drawn inside it, it covered the lines
  // near the top (a curve that starts high and stays there).
  const legendHeight = 12 * legend.length + 4;
  const width = 460, height = 150 + legendHeight, pad = 54, plotTop = 8 + legendHeight;
  const top = largest([alloc, reserved, peak], 1);
  const at = Array.isArray(seriesIterations) && seriesIterations.length === alloc.length
    ? seriesIterations : alloc.map((_, i) => i);
  const n = Math.max(1, iterations || 0, at.length ? at[at.length - 1] + 1 : 0);
  const x = (i) => pad + ((width - pad - 8) * (at[i] ?? i)) / Math.max(n - 1, 1);
  const y = (v) => plotTop + (height - plotTop - 26) * (1 - v / top);
  // A screen reader hears what the eye takes from the lines: where the memory began, where it
  // ended, and the leak's rate when one is drawn.
  const first = alloc.length ? alloc[0] : 0, last = alloc.length ? alloc[alloc.length - 1] : 0;
  const said = `memory allocated at each ${noun}'s end, ${formatBytes(first)} to ${formatBytes(last)} ` +
    `over ${n} ${noun}s` + (showTrend ? `; leak trend ${formatBytes(leakRate)} per ${noun}` : "");
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, class: "tl-curve",
                             preserveAspectRatio: "xMinYMin meet", role: "img", "aria-label": said });
  const text = (x0, y0, content, anchor = "start") => {
    const t = svgEl("text", { x: x0, y: y0, "text-anchor": anchor });
    t.textContent = visible(content);
    svg.appendChild(t);
    return t;
  };
  svg.appendChild(svgEl("line", { class: "axis", x1: pad, y1: y(0), x2: width - 8, y2: y(0) }));
  svg.appendChild(svgEl("line", { class: "axis", x1: pad, y1: y(0), x2: pad, y2: y(top) }));
  text(pad - 4, y(top) + 4, formatBytes(top), "end");
  text(pad - 4, y(top / 2) + 4, formatBytes(top / 2), "end");
  text(pad - 4, y(0) + 4, "0", "end");
  text(pad, height - 6, "1");
  text(width - 8, height - 6, `${n}`, "end");
  text((pad + width) / 2, height - 6, noun, "middle");
  const line = (values, cls) => {
    const pts = downsample(values, 200);
    const path = svgEl("polyline", { class: cls, points: pts.map(([i, v]) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ") });
    path.dataset.testid = cls === "alloc" ? "curve-allocated" : "curve-reserved";
    path.dataset.points = String(pts.length);
    return path;
  };
  if (showPeak) svg.appendChild(line(peak, "peak"));
  if (showReserved) svg.appendChild(line(reserved, "reserved"));
  svg.appendChild(line(alloc, "alloc"));
  if (showTrend) {
    // Through the last point. Per iteration the rate is the curve's own slope; per cell run
    // it is not, so the line takes the curve's least-squares slope, which the core writes
    // (at the leak's rate it ended far from the data).
    const last = alloc.length - 1;
    const slope = rateIsPerCellRun ? device.allocated_trend_per_iteration ?? leakRate : leakRate;
    const end = alloc[last];
    // From the knot the growth left from: the last point before its first grown iteration.
    let first = 0;
    while (first < last && at[first + 1] <= onset - 1) first += 1;
    const start = end - slope * (at[last] - at[first]);
    const trend = svgEl("line", { class: "trend", x1: x(first), y1: y(Math.max(start, 0)), x2: x(last), y2: y(end) });
    trend.dataset.testid = "curve-trend";
    svg.appendChild(trend);
  }
  legend.forEach(([cls, label], k) => {
    const lx = pad + 8, ly = 12 + 12 * k;
    svg.appendChild(svgEl("line", { class: cls, x1: lx, y1: ly - 3, x2: lx + 14, y2: ly - 3 }));
    text(lx + 18, ly, label).dataset.testid = "curve-legend";
  });
  // Hover readout: the iteration under the pointer and its allocated bytes.
  const readout = svgEl("text", { class: "readout", x: width - 8, y: 14, "text-anchor": "end" });
  readout.dataset.testid = "curve-readout";
  svg.appendChild(readout);
  svg.addEventListener("mousemove", (event) => {
    const box = svg.getBoundingClientRect();
    const px = ((event.clientX - box.left) / Math.max(box.width, 1)) * width;
    const it = Math.round(((px - pad) / (width - pad - 8)) * Math.max(n - 1, 1));
    let i = 0; // the last point taken at or before that iteration
    while (i + 1 < at.length && at[i + 1] <= it) i++;
    readout.textContent = `${noun} ${(at[i] ?? i) + 1}: ${formatBytes(alloc[i] || 0)}` +
      (peak[i] > (alloc[i] || 0) ? `, peak ${formatBytes(peak[i])}` : "");
  });
  svg.addEventListener("mouseleave", () => { readout.textContent = ""; });
  return svg;
}

// The width of a chart's words at its 10 px font, in the viewBox's units, before the chart is
// in the page to be measured: an upper bound (6 px a character; sans-serif averages 5.5).
function textWidth(words) {
  return 6 * String(words).length;
}

// What each iteration's peak was made of: the core's roles (devices[].roles, stacking order)
// as stacked areas, the highest peak marked, the leaks' roles outlined and named in the legend.
// Colours are the static views' (render/chart.py ROLE_COLOURS; a test holds them equal).
function drawRoles(device, iterations, noun, seriesIterations, leakRoles) {
  const roles = (device.roles || []).filter((r) => Array.isArray(r.at_peak) && r.at_peak.some((v) => v > 0));
  if (!roles.length) return null;
  const count = roles[0].at_peak.length;
  const totals = Array.from({ length: count }, (_, i) => roles.reduce((s, r) => s + (Number(r.at_peak[i]) || 0), 0));
  // The legend flows in rows, each entry as wide as its words: three fixed slots of 132 px cut
  // "inputs and outputs (leak)" under the next entry.
  const width = 460, pad = 54;
  const legend = [];
  let lx = pad + 8, ly = 12;
  roles.forEach((r) => {
    const words = (r.label || r.role) + (leakRoles.has(r.role) ? " (leak)" : "");
    const wide = 14 + textWidth(words) + 12;
    if (lx > pad + 8 && lx + wide > width - 4) { lx = pad + 8; ly += 12; }
    legend.push({ r, words, lx, ly });
    lx += wide;
  });
  const plotTop = ly + 8, height = 130 + plotTop;
  const top = largest([totals], 1);
  const at = Array.isArray(seriesIterations) && seriesIterations.length === count
    ? seriesIterations : totals.map((_, i) => i);
  const n = Math.max(1, iterations || 0, at.length ? at[at.length - 1] + 1 : 0);
  // One point spans the width: a run of one iteration is a band, not a line.
  const x = (i) => count === 1 ? (i === 0 ? pad : width - 8)
    : pad + ((width - pad - 8) * (at[i] ?? i)) / Math.max(n - 1, 1);
  const y = (v) => plotTop + (height - plotTop - 26) * (1 - v / top);
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, class: "tl-curve tl-roles",
                             preserveAspectRatio: "xMinYMin meet", role: "img",
                             "aria-label": `memory by role at each ${noun}'s peak` });
  svg.dataset.testid = "roles-chart";
  const text = (x0, y0, content, anchor = "start") => {
    const t = svgEl("text", { x: x0, y: y0, "text-anchor": anchor });
    t.textContent = visible(content);
    svg.appendChild(t);
    return t;
  };
  // A hostile report's long series is drawn through the points that keep each stretch's
  // lowest and highest total, the same for every role so that the layers stack.
  const idx = count === 1 ? [0, 0] : downsample(totals, 200).map(([i]) => i);
  const xs = count === 1 ? [x(0), x(1)] : idx.map(x);
  const below = new Array(count).fill(0);
  roles.forEach((r) => {
    const upper = idx.map((i) => below[i] + (Number(r.at_peak[i]) || 0));
    const lower = idx.map((i) => below[i]);
    const pts = xs.map((px, k) => `${px.toFixed(1)},${y(upper[k]).toFixed(1)}`)
      .concat(xs.map((px, k) => `${px.toFixed(1)},${y(lower[k]).toFixed(1)}`).reverse());
    const leak = leakRoles.has(r.role);
    const area = svgEl("polygon", { class: `role role-${r.role}${leak ? " leak-role" : ""}`, points: pts.join(" ") });
    area.dataset.testid = "role-area";
    area.dataset.role = r.role;
    const title = svgEl("title", {});
    title.textContent = visible(r.label || r.role);
    area.appendChild(title);
    svg.appendChild(area);
    for (let i = 0; i < count; i++) below[i] += Number(r.at_peak[i]) || 0;
  });
  svg.appendChild(svgEl("line", { class: "axis", x1: pad, y1: y(0), x2: width - 8, y2: y(0) }));
  svg.appendChild(svgEl("line", { class: "axis", x1: pad, y1: y(0), x2: pad, y2: y(top) }));
  text(pad - 4, y(top) + 4, formatBytes(top), "end");
  text(pad - 4, y(0) + 4, "0", "end");
  text(pad, height - 6, "1");
  text(width - 8, height - 6, `${n}`, "end");
  text((pad + width) / 2, height - 6, `peak of each ${noun}`, "middle");
  let highest = 0;
  totals.forEach((v, i) => { if (v > totals[highest]) highest = i; });
  const hx = count === 1 ? (pad + width - 8) / 2 : x(highest);
  const mark = svgEl("line", { class: "peak-mark", x1: hx, y1: y(top), x2: hx, y2: y(0) });
  mark.dataset.testid = "roles-peak";
  svg.appendChild(mark);
  // Right of the mark where it fits, else left of it: "peak 122.4 MiB" was cut at the edge.
  const peakWords = `peak ${formatBytes(top)}`;
  const fitsRight = hx + 3 + textWidth(peakWords) <= width - 2;
  text(fitsRight ? hx + 3 : hx - 3, y(top) + 10, peakWords, fitsRight ? "start" : "end").dataset.testid = "roles-peak-label";
  legend.forEach(({ r, words, lx: ex, ly: ey }) => {
    const leak = leakRoles.has(r.role);
    svg.appendChild(svgEl("rect", { class: `role role-${r.role}${leak ? " leak-role" : ""}`, x: ex, y: ey - 8, width: 10, height: 8 }));
    text(ex + 14, ey, words).dataset.testid = "roles-legend";
  });
  return svg;
}

// A path as the core shortened it (middle steps elided), the whole path in its tooltip; a
// report written before `path_short` shows the whole path, wrapped.
function pathName(owner) {
  const whole = (owner && owner.path_text) || "";
  const short = (owner && owner.path_short) || whole;
  const name = el("code", { class: "tl-path-name", "data-testid": "path-name" }, short || "?");
  if (whole && whole !== short) name.title = whole;
  return name;
}

function pathTree(finding) {
  const details = el("details", { class: "tl-path", "data-testid": "path-tree" });
  const summary = el("summary", {}, "held by ");
  summary.appendChild(pathName(finding));
  if (finding.holder) {
    summary.appendChild(document.createTextNode(" — holder "));
    summary.appendChild(pathName(finding.holder));
    // The core's words ("+192 entries per iteration, sharing 1 storage"); an older report's number.
    const growth = typeof finding.holder.growth_text === "string" ? finding.holder.growth_text
      : `+${Number(finding.holder.growth_per_iteration || 0).toPrecision(2)}/iteration`;
    summary.appendChild(document.createTextNode(` (${growth})`));
  }
  details.appendChild(summary);
  for (const step of finding.path || []) {
    const row = el("div", { class: "tl-step", "data-testid": "path-step" });
    const t = step.tensor;
    const what = t ? t.text || "tensor" : step.type || "";
    row.appendChild(el("b", {}, step.label));
    row.appendChild(document.createTextNode(` ${step.kind} ${what}`));
    if (step.note) row.appendChild(el("span", { class: "tl-note" }, ` (${step.note})`));
    details.appendChild(row);
  }
  if (finding.suggestion) details.appendChild(fixLine(finding.suggestion, "tl-step", finding.fix_code));
  return details;
}

// "fix: ..." and, where the core could write it, the fix as code with a button that copies
// that code (pasting prose was a SyntaxError). The clipboard API needs a secure context;
// elsewhere the code is selected for the user to copy. `scrolls`: the code sits in a box of
// capped height (a group's fix, one line per holder), which the keyboard must reach to scroll.
function fixLine(text, cls, code, scrolls = false) {
  const line = el("div", { class: cls });
  line.appendChild(document.createTextNode("fix: "));
  line.appendChild(el("span", { class: "tl-fix" }, text));
  if (!code) return line;
  const snippet = el("code", { class: "tl-fix-code", "data-testid": "fix-code",
                               ...(scrolls ? { tabindex: "0" } : {}) }, code);
  const button = el("button", { class: "tl-copy", "data-testid": "copy-fix", type: "button", title: "copy this line of code" }, "copy");
  button.addEventListener("click", (event) => {
    event.stopPropagation();
    const done = () => { button.textContent = "copied"; setTimeout(() => { button.textContent = "copy"; }, 1500); };
    const select = () => {
      const range = document.createRange();
      range.selectNodeContents(snippet);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      button.textContent = "selected: press Ctrl+C";
    };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(code).then(done, select);
    else select();
  });
  const codeLine = el("div", { class: "tl-fix-line" });
  codeLine.appendChild(snippet);
  codeLine.appendChild(button);
  line.appendChild(codeLine);
  return line;
}

// The allocation stack, built when opened: innermost first, library frames dimmed.
function stackTree(finding) {
  const details = el("details", { class: "tl-stack", "data-testid": "stack" });
  const frames = finding.stack || [];
  details.appendChild(el("summary", {}, `stack (${frames.length} frame${frames.length === 1 ? "" : "s"})`));
  details.addEventListener("toggle", () => {
    if (!details.open || details.dataset.built) return;
    details.dataset.built = "true";
    for (const frame of frames) {
      const row = el("div", { class: frame.user === false ? "tl-frame tl-lib" : "tl-frame", "data-testid": "stack-frame" },
        `${siteText(frame)} in ${frame.function || "?"}`);
      if (frame.source) row.appendChild(el("code", { class: "tl-source" }, ` ${frame.source}`));
      details.appendChild(row);
    }
  });
  return details;
}

// A torch.distributed job's ranks, a line each, then how they differ (the core's lines).
function ranksBox(job) {
  const box = el("div", { class: "tl-device", "data-testid": "ranks" });
  box.appendChild(el("b", {}, `job of ${job.world_size} ranks`));
  for (const rank of job.ranks || []) box.appendChild(el("div", { "data-testid": "rank" }, rank.text || ""));
  for (const line of job.skew_text || []) box.appendChild(el("div", { class: "tl-warning" }, line));
  return box;
}

// tqdm's line: a bar, k/n, elapsed and remaining, the rate; a Stop button while it runs (it
// interrupts the kernel: the report of the iterations seen is kept). Done: "20 iterations in
// 12.1 s".
// The out-of-memory forensics, first under the head: the account the core wrote, then what was
// live on the failing device by holder and by site.
function oomBox(oom) {
  const box = el("div", { class: "tl-oom", "data-testid": "oom" });
  box.appendChild(el("b", { class: "tl-verdict-leak" }, "OUT OF MEMORY "));
  box.appendChild(document.createTextNode(oom.text || ""));
  if (oom.roles_text) box.appendChild(el("div", { class: "tl-note", "data-testid": "oom-roles" }, oom.roles_text));
  const lists = [["live by holder", (oom.by_holder || []).map((h) => [h.holder, h.size_text || ""])],
                 ["by site", (oom.by_site || []).map((s) => [s.site, s.size_text || ""])]];
  for (const [title, rows] of lists) {
    if (!rows.length) continue;
    const line = el("div", { class: "tl-note", "data-testid": "oom-list" }, `${title}: `);
    rows.slice(0, 5).forEach(([name, size], i) => {
      if (i) line.appendChild(document.createTextNode(", "));
      line.appendChild(el("code", {}, name));
      line.appendChild(document.createTextNode(` ${size}`));
    });
    box.appendChild(line);
  }
  return box;
}

// The line itself is Python's (format.progress_text, sent as `progress.text`); the view draws
// the bar and the button around it.
function progressLine(progress, model) {
  const box = el("div", { class: "tl-progress", "data-testid": "progress" });
  const k = Number(progress.k || 0), n = Number(progress.n || 0);
  if (progress.done) {
    // A notebook saved before progress carried its line still says how far the run got.
    box.appendChild(el("span", { "data-testid": "run-line" }, progress.text || `${k}/${n}`));
    return box;
  }
  // Named, and read out as the line beside it ("5/20 iterations [2.5 s<7.5 s, 2.0 it/s]").
  const bar = el("span", { class: "tl-bar", role: "progressbar", "aria-label": "progress of the run",
                           "aria-valuemin": "0", "aria-valuemax": String(n), "aria-valuenow": String(k),
                           "aria-valuetext": progress.text || `${k}/${n}` });
  const fill = el("span", { class: "tl-bar-fill" });
  fill.style.width = `${n ? (100 * k) / n : 0}%`;
  bar.appendChild(fill);
  box.appendChild(bar);
  box.appendChild(el("span", {}, ` ${progress.text || `${k}/${n}`}`));
  const kernel = model && model.widget_manager && model.widget_manager.kernel;
  if (kernel && typeof kernel.interrupt === "function") {
    const stop = el("button", { class: "tl-stop", "data-testid": "stop", type: "button", title: "interrupt the kernel: the report of the iterations so far is kept" }, "Stop");
    stop.addEventListener("click", () => { stop.disabled = true; stop.textContent = "stopping…"; kernel.interrupt(); });
    box.appendChild(stop);
  }
  return box;
}

// Scroll to the notebook cell a site points at (`In [n]`), found by its input prompt. Plain
// DOM, so it works in JupyterLab and Notebook 7 when the cell is rendered; elsewhere a no-op.
// Only in the notebook the view is in (two notebooks side by side have their own In [n]).
// Enter and Space act like a click, once: on the view's buttons too, instead of their native
// activation, as the browser tests hold (the notebook takes no key, nothing runs twice).
function onActivate(node, action) {
  node.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      action();
    }
  });
}

function revealCell(number, host, line) {
  const notebook = host.closest(".jp-Notebook, #notebook-container") || host.ownerDocument;
  const prompts = notebook.querySelectorAll(".jp-InputPrompt, .input_prompt");
  for (const prompt of prompts) {
    if (prompt.textContent.replace(/\s/g, "").startsWith(`[${number}]`)) {
      const cell = prompt.closest(".jp-Cell, .cell") || prompt;
      // Selected as a click on its prompt selects it (JupyterLab and Notebook 7 listen there).
      prompt.dispatchEvent(new MouseEvent("mousedown", { bubbles: true, cancelable: true }));
      cell.scrollIntoView({ block: "center" });
      cell.dataset.torchleakHighlight = "true";
      cell.style.outline = "2px solid var(--jp-brand-color1, #1976d2)";
      // The site's line, marked in the cell's editor (line 1 is the cell's first line).
      const lines = cell.querySelectorAll(".cm-line, .CodeMirror-line");
      const marked = line > 0 ? lines[line - 1] : null;
      if (marked) {
        marked.dataset.torchleakLine = "true";
        marked.style.background = "var(--jp-warn-color3, #fff4e5)";
      }
      setTimeout(() => {
        cell.style.outline = "";
        delete cell.dataset.torchleakHighlight;
        if (marked) { marked.style.background = ""; delete marked.dataset.torchleakLine; }
      }, 2500);
      return true;
    }
  }
  return false;
}

// A check's progress: k of n done, and the line Python wrote for it.
const PROGRESS = { k: "number", n: "number", done: "boolean", text: "string", said: ["string"] };

// How many leaks and finding rows are drawn before "show N more" (LEAKS_SHOWN: as the static
// views, torchleak/render/format.py).
const LEAKS_SHOWN = 3;
const ROWS_SHOWN = 25;

// Leaks first when sorting by verdict, not the alphabet's order.
const VERDICT_RANK = { leak: 0, growth: 1, undecided: 2, fragmentation: 3, plateau: 4, warmup: 5, transient: 6 };

const COLUMNS = [
  ["verdict", (f) => -(VERDICT_RANK[f.verdict] ?? 7)],
  ["site", (f) => siteText(f.site)],
  ["per", (f) => f.bytes_per_iteration], // "per iteration", "per cell run": the report's unit
  ["live", (f) => f.total_bytes],
  ["holder", (f) => (f.holder ? f.holder.path_text : f.path_text || "")],
];

// What the user chose in one view, kept across redraws (a live update, a sort): the sort,
// which <details> are open, whether "show N more" was pressed, and which control keeps the
// keyboard focus through the redraw it caused.
function viewState(redraw) {
  const view = {
    sortBy: null, descending: true, // null: the report's own order (leaks first, biggest first)
    showAllCauses: false, showAllRows: false,
    focusAfterDraw: null,
    opened: new Set(),
    redraw,
  };
  // A <details> the user opened stays open across redraws; the toggle event is sent again so
  // that what it builds when opened (a stack's frames) is built.
  view.rememberOpen = (details, key) => {
    details.open = view.opened.has(key);
    if (details.open) details.dispatchEvent(new Event("toggle"));
    details.addEventListener("toggle", () => { if (details.open) view.opened.add(key); else view.opened.delete(key); });
    return details;
  };
  // "show 47 more leaks" / "show fewer leaks": flips its state and redraws, keeping the
  // keyboard focus on itself.
  view.moreButton = (hidden, noun, shownAll, testid, flip) => {
    const text = shownAll ? `show fewer ${noun}s` : `show ${hidden} more ${noun}${hidden === 1 ? "" : "s"}`;
    const button = el("button", { class: "tl-more", type: "button", "data-testid": testid }, text);
    button.addEventListener("click", () => { flip(); view.focusAfterDraw = testid; view.redraw(); });
    return button;
  };
  return view;
}

// The holder is part of a finding's identity: one site's outputs kept in two lists are two rows.
// The verdict is not: it changes as a live run gathers evidence, and an opened row stays open.
const rowKey = (f) => `${siteText(f.site)}\u001f${f.device}\u001f${(f.holder && f.holder.path_text) || ""}`;

// The headline, what was dropped from a malformed report, progress, the out-of-memory
// forensics, sampling and a job's ranks: everything above the leaks.
function drawHead(root, report, problem, progress, model) {
  const summary = report.summary || {};
  const head = el("div", { class: "tl-head" });
  head.appendChild(el("b", {}, "torchleak"));
  const unit = report.iteration_unit || "iteration"; // the core's word: "iteration", "cell run"
  head.appendChild(document.createTextNode(`: ${summary.headline || ""} in ${report.iterations || 0} ${unit}(s)`));
  root.appendChild(head);
  if (problem) root.appendChild(el("div", { class: "tl-warning", "data-testid": "report-problem" }, problem));
  if (progress.n) root.appendChild(progressLine(progress, model));
  if (report.oom) root.appendChild(oomBox(report.oom));
  if (report.sampling) root.appendChild(el("div", { class: "tl-note", "data-testid": "sampling" }, `sampled: ${report.sampling.text || ""}`));
  if (report.ranks) root.appendChild(ranksBox(report.ranks));
}

// The core's groups (fifty lists in one object, one line), biggest first; the first few
// shown, the rest behind "show N more". A report from before groups: each cause alone.
function drawCauses(root, report, view) {
  const findings = report.findings || [];
  const causes = report.causes || [];
  if (!causes.length && report.iterations) {
    root.appendChild(el("div", { class: "tl-ok", "data-testid": "no-leak" },
      `No leak. ${(report.summary || {}).headline || ""}`));
  }
  const groups = report.cause_groups || causes.map((c, i) => ({ text: c.text, severity: c.severity, causes: [i] }));
  const causeLine = (cause, testid) => {
    const line = el("div", { class: "tl-cause", "data-testid": testid });
    line.appendChild(el("b", { class: "tl-verdict-leak" }, "LEAK "));
    line.appendChild(document.createTextNode(`${cause.text} [${cause.severity}]`));
    // The code of the fix is its biggest finding's, when that finding's fix is the cause's.
    const lead = findings[(cause.findings || [])[0]];
    const code = lead && lead.suggestion === cause.suggestion ? lead.fix_code : "";
    if (cause.suggestion) line.appendChild(fixLine(cause.suggestion, "tl-note", code));
    return line;
  };
  const groupLine = (group) => {
    const members = (group.causes || []).map((i) => causes[i]).filter(Boolean);
    if (members.length === 1) return causeLine(members[0], "cause");
    const line = el("div", { class: "tl-cause", "data-testid": "cause-group" });
    line.appendChild(el("b", { class: "tl-verdict-leak" }, "LEAK "));
    line.appendChild(document.createTextNode(`${group.text} [${group.severity}]`));
    // One line per member: the biggest member's own code would free one of them.
    // In a box of capped height: fifty lines of code made the view 2,000 px tall.
    if (group.fix_code) line.appendChild(fixLine(`free all ${members.length} together`, "tl-note tl-group-fix", group.fix_code, true));
    const details = el("details", { class: "tl-group" });
    details.appendChild(el("summary", {}, `the ${members.length} leaks`));
    const box = el("div", { class: "tl-capped" });
    for (const cause of members) box.appendChild(causeLine(cause, "group-cause"));
    details.appendChild(box);
    line.appendChild(view.rememberOpen(details, `group\u001f${group.container || ""}\u001f${members[0].text}`));
    return line;
  };
  groups.slice(0, LEAKS_SHOWN).forEach((g) => root.appendChild(groupLine(g)));
  if (groups.length > LEAKS_SHOWN) {
    if (view.showAllCauses) {
      const box = el("div", { class: "tl-capped", "data-testid": "more-causes" });
      groups.slice(LEAKS_SHOWN).forEach((g) => box.appendChild(groupLine(g)));
      root.appendChild(box);
    }
    root.appendChild(view.moreButton(groups.length - LEAKS_SHOWN, "leak", view.showAllCauses, "show-more-causes",
                                     () => { view.showAllCauses = !view.showAllCauses; }));
  }
}

// Each device's line, growth curve and memory by role, with its spikes.
function drawDevices(root, report) {
  const unit = report.iteration_unit || "iteration";
  for (const device of report.devices || []) {
    const box = el("div", { class: "tl-device", "data-testid": "growth-curve" });
    const rate = device.leak_bytes_per_iteration || 0;
    const onsets = (report.findings || [])
      .filter((f) => f.verdict === "leak" && f.device === device.device && f.growth_since)
      .map((f) => f.growth_since.iteration)
      .filter((i) => Number.isFinite(i));
    box.appendChild(el("div", {}, device.text || device.device || ""));
    box.appendChild(drawCurve(device, rate, report.iterations || 0, unit, report.series_iterations,
                              report.boundary === "cell", onsets.length ? Math.min(...onsets) : 0));
    const leakRoles = new Set((device.roles || []).filter((r) => r.leaks).map((r) => r.role));
    const roles = drawRoles(device, report.iterations || 0, unit, report.series_iterations, leakRoles);
    if (roles) {
      if (device.roles_text) box.appendChild(el("div", { class: "tl-note", "data-testid": "roles-text" }, device.roles_text));
      box.appendChild(roles);
      for (const spike of device.spikes || []) {
        box.appendChild(el("div", { class: "tl-note", "data-testid": "spike" }, `spike: ${spike.text || ""}`));
      }
    }
    root.appendChild(box);
  }
}

// A finding's site cell: a notebook site links to its cell; its source line, the library line
// it was allocated inside, its ranks and when its growth began beneath (the core's words).
function siteCell(f, host) {
  const site = f.site || {};
  const cell = el("td", {}, `${siteText(site)} ${site.function || ""}`);
  if (site.cell !== undefined) {
    const link = el("a", { href: "#", class: "tl-site-link", "data-testid": "site-link", title: "show the cell" }, siteText(site));
    link.addEventListener("click", (event) => {
      event.preventDefault();
      event.stopPropagation();
      if (!revealCell(site.cell, host, site.line)) {
        const gone = `no cell shows In [${site.cell}] in this notebook now (re-run since?)`;
        link.title = gone;
        link.classList.add("tl-missing");
        if (!cell.querySelector("[data-testid=cell-gone]")) {
          cell.insertBefore(el("div", { class: "tl-note", "data-testid": "cell-gone" }, gone), link.nextSibling);
        }
      }
    });
    cell.replaceChildren(link, document.createTextNode(` ${site.function || ""}`));
  }
  if (site.source) cell.appendChild(el("code", { class: "tl-source", "data-testid": "site-source" }, site.source));
  // The installed package's line under the user's site, in the words of the text report.
  const inside = f.allocated_inside;
  if (inside && inside.text) {
    const words = `allocated inside ${inside.text}` + (inside.function ? ` (${inside.function})` : "");
    cell.appendChild(el("div", { class: "tl-note", "data-testid": "allocated-inside" }, words));
  }
  // The op of torch.compile's generated code that made the buffer: the core's words.
  if (f.compiled_op && f.compiled_op.text) {
    cell.appendChild(el("div", { class: "tl-note", "data-testid": "compiled-op" }, f.compiled_op.text));
  }
  if (f.ranks_text) cell.appendChild(el("div", { class: "tl-note", "data-testid": "ranks-text" }, f.ranks_text));
  // When the growth began, or that it stopped: the core's words ("leaking since iteration 122, ...").
  if (f.growth_since && f.growth_since.text) {
    cell.appendChild(el("div", { class: "tl-note", "data-testid": "growth-text" }, f.growth_since.text));
  }
  return cell;
}

// A finding's row and, when it has a path or a stack, the row of its details beneath.
function findingRows(table, f, view, host) {
  const row = el("tr", { class: "tl-row", "data-testid": "finding-row" });
  const verdictCell = el("td", { class: `tl-verdict tl-verdict-${f.verdict}` }, f.verdict);
  row.appendChild(verdictCell);
  row.appendChild(siteCell(f, host));
  // The core's word: the rate, or "held" for a leak that keeps memory without growing.
  row.appendChild(el("td", { class: "tl-num" }, f.rate_text || formatBytes(f.bytes_per_iteration)));
  const liveCell = el("td", { class: "tl-num" }, formatBytes(f.total_bytes));
  if (f.tensor_text) liveCell.appendChild(el("div", { class: "tl-note", "data-testid": "tensor-text" }, f.tensor_text));
  row.appendChild(liveCell);
  const holderCell = el("td", { class: "tl-holder" });
  if (f.holder || f.path_text) holderCell.appendChild(pathName(f.holder || f));
  row.appendChild(holderCell);
  table.appendChild(row);
  if (!(f.path || []).length && !(f.stack || []).length) return;
  const detailRow = el("tr");
  const cell = el("td", { colspan: String(COLUMNS.length) });
  const k = rowKey(f);
  // Rows the user opened stay open across redraws, the path and the stack each.
  const keep = (details, key) => cell.appendChild(view.rememberOpen(details, key));
  const tree = (f.path || []).length ? keep(pathTree(f), k) : null;
  if ((f.stack || []).length) keep(stackTree(f), `${k}\u001fstack`);
  detailRow.appendChild(cell);
  table.appendChild(detailRow);
  if (tree) {
    // A click anywhere on the row opens its path; from the keyboard, the verdict is the row's
    // disclosure button (Tab to it, Enter or Space). The button, not the row, says whether it
    // is open: a table row has no expanded state of its own (only a treegrid's has).
    const button = el("button", { type: "button", class: "tl-disclose", "data-testid": "open-row",
                                   "aria-expanded": String(tree.open) }, f.verdict);
    verdictCell.replaceChildren(button);
    tree.addEventListener("toggle", () => button.setAttribute("aria-expanded", String(tree.open)));
    // aria-expanded is set here too: the details' toggle event comes later, asynchronously.
    const toggle = () => {
      tree.open = !tree.open;
      button.setAttribute("aria-expanded", String(tree.open));
      if (tree.open) tree.scrollIntoView({ block: "nearest" });
    };
    row.addEventListener("click", toggle);
    onActivate(button, toggle);
  }
}

// The findings' table, sortable by any column, the first rows shown and the rest behind
// "show N more"; many findings scroll inside a box of capped height, not down the notebook.
function drawFindings(root, report, view, host) {
  const findings = report.findings || [];
  const unit = report.iteration_unit || "iteration";
  const table = el("table", { class: "tl-table", "data-testid": "findings" });
  const header = el("tr");
  COLUMNS.forEach(([name], i) => {
    const sorted = i === view.sortBy;
    // The header cell says how the column is sorted; the button inside it sorts (a header that
    // is itself a button has no sort state a screen reader can read).
    const th = el("th", { "data-testid": `column-${i}`,
                          "aria-sort": sorted ? (view.descending ? "descending" : "ascending") : "none" });
    const button = el("button", { type: "button", class: "tl-sort", "data-testid": `sort-${i}`, title: "sort" },
                      (name === "per" ? `per ${unit}` : name) + (sorted ? (view.descending ? " ▾" : " ▴") : ""));
    th.appendChild(button);
    const sort = () => {
      view.descending = view.sortBy === i ? !view.descending : true;
      view.sortBy = i;
      view.focusAfterDraw = `sort-${i}`;
      view.redraw();
    };
    button.addEventListener("click", sort);
    onActivate(button, sort);
    header.appendChild(th);
  });
  table.appendChild(header);
  const key = view.sortBy === null ? null : COLUMNS[view.sortBy][1];
  const sorted = key === null ? findings : findings.slice().sort((a, b) => {
    const ka = key(a), kb = key(b);
    let c = typeof ka === "number" ? ka - kb : String(ka).localeCompare(String(kb));
    if (c === 0) c = (a.bytes_per_iteration - b.bytes_per_iteration) || (a.total_bytes - b.total_bytes);
    return view.descending ? -c : c;
  });
  for (const f of view.showAllRows ? sorted : sorted.slice(0, ROWS_SHOWN)) findingRows(table, f, view, host);
  const tableBox = el("div", { class: "tl-table-box", "data-testid": "findings-box" });
  tableBox.appendChild(table);
  root.appendChild(tableBox);
  if (sorted.length > ROWS_SHOWN) {
    root.appendChild(view.moreButton(sorted.length - ROWS_SHOWN, "finding", view.showAllRows, "show-more-findings",
                                     () => { view.showAllRows = !view.showAllRows; }));
  }
}

function render({ model, el: host }) {
  const root = el("div", { class: "tl-root", "data-testid": "torchleak-widget" });
  const style = document.createElement("style");
  style.textContent = __TORCHLEAK_CSS__;
  host.appendChild(style);
  host.appendChild(root);

  const drawReport = () => {
    const { report, problem } = checkReport(model.get("report"));
    const progress = conform(model.get("progress"), PROGRESS, "progress", []) || {};
    drawHead(root, report, problem, progress, model);
    drawCauses(root, report, view);
    // Below the verdict: a warning qualifies the answer, it is not the answer. One the run line
    // already says (a check the user stopped) is not said twice.
    const said = new Set(progress.said || []);
    for (const warning of (report.warnings || []).filter((w) => !said.has(w))) {
      root.appendChild(el("div", { class: "tl-warning", "data-testid": "warning" }, warning));
    }
    drawDevices(root, report);
    drawFindings(root, report, view, host);
    const summary = report.summary || {};
    if (summary.empty_text) root.appendChild(el("div", {}, summary.empty_text));
    if (view.focusAfterDraw) {
      const again = root.querySelector(`[data-testid="${view.focusAfterDraw}"]`);
      view.focusAfterDraw = null;
      if (again) again.focus();
    }
  };
  const draw = () => {
    root.replaceChildren();
    try {
      drawReport();
    } catch (error) {
      // Whatever slipped past the check stays in this output: JupyterLab goes on drawing the rest.
      root.replaceChildren(el("div", { class: "tl-warning", "data-testid": "render-error" },
        `torchleak could not draw this report: ${(error && error.message) || error}`));
    }
  };
  const view = viewState(draw);

  draw();
  model.on("change:report", draw);
  model.on("change:progress", draw);
  return () => {
    model.off("change:report", draw);
    model.off("change:progress", draw);
  };
}

export default { render };
