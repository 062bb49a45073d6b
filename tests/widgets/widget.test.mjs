// Unit tests of the widget's pure parts (node --test, in make test-widgets): the check every
// saved report passes before it is drawn, and the thinning of long curves. The drawing itself
// is tested in headless Chromium (tests/browser).
import assert from "node:assert/strict";
import { test } from "node:test";

import { checkReport, conform, downsample, FIELDS_READ, NOT_SHOWN, visible } from "../../widgets/src/torchleak-widget.js";

test("a report that is not an object draws nothing and says so", () => {
  for (const raw of ["a string", 42, true, [1, 2]]) {
    const { report, problem } = checkReport(raw);
    assert.deepEqual(report, {});
    assert.match(problem, /not a JSON object|not an object/);
  }
  assert.deepEqual(checkReport(null), { report: {}, problem: "" });
});

test("a field of the wrong kind is dropped and named, the rest kept", () => {
  const { report, problem } = checkReport({
    iterations: 5,
    findings: [{ verdict: "leak", total_bytes: "lots", site: { text: "a.py:3", line: 3 } }],
  });
  assert.equal(report.iterations, 5);
  assert.deepEqual(report.findings, [{ verdict: "leak", site: { text: "a.py:3", line: 3 } }]);
  assert.equal(problem, "this report is malformed, drawn without what does not fit: findings[0].total_bytes is a string, not a number");
});

test("past five problems the line counts the rest instead of listing them", () => {
  const warnings = Array.from({ length: 9 }, (_, i) => i);
  const { report, problem } = checkReport({ warnings });
  assert.deepEqual(report.warnings, []);
  assert.match(problem, /warnings\[4\] is a number, not a string; and 4 more$/);
});

test("absent fields are no problem and unknown fields are not read", () => {
  const problems = [];
  const out = conform({ verdict: null, hidden: "<script>" }, FIELDS_READ.finding, "f", problems);
  assert.deepEqual(out, {});
  assert.deepEqual(problems, []);
});

test("a number must be finite and a list a list", () => {
  const problems = [];
  conform({ iterations: Infinity, warnings: "w", series_iterations: [1, NaN, 3] }, FIELDS_READ.report, "", problems);
  assert.deepEqual(problems, [
    "iterations is not a finite number, not a number",
    "series_iterations[1] is not a finite number, not a number",
    "warnings is a string, not a list",
  ]);
});

test("the reading list and the list of what is not shown never share a field", () => {
  for (const part of ["report", "finding"]) {
    const read = new Set(Object.keys(FIELDS_READ[part]));
    assert.deepEqual(NOT_SHOWN[part].filter((k) => read.has(k)), []);
  }
});

test("a short curve is drawn whole", () => {
  assert.deepEqual(downsample([5, 1, 9], 200), [[0, 5], [1, 1], [2, 9]]);
});

test("a long curve keeps each bucket's lowest and highest point, in order, and its spike", () => {
  const values = Array.from({ length: 400000 }, (_, i) => i % 1000);
  values[123457] = 1e9;
  const points = downsample(values, 200);
  assert.ok(points.length <= 400, `${points.length} points`);
  assert.ok(points.some(([i, v]) => i === 123457 && v === 1e9));
  assert.ok(points.every(([i], k) => k === 0 || points[k - 1][0] < i));
  assert.equal(Math.min(...points.map(([, v]) => v)), 0);
});

test("controls and bidirectional characters are shown as their escapes, as in the text view", () => {
  assert.equal(visible("nul\u0000byte"), "nul\\x00byte");
  assert.equal(visible("esc\u001b[31mred"), "esc\\x1b[31mred");
  assert.equal(visible("\u202egnp.exe"), "\\u202egnp.exe");
  assert.equal(visible("tab\tand\nnewline stay, é and 漢 too"), "tab\tand\nnewline stay, é and 漢 too");
});
