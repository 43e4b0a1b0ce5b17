// The panel's usage history: one chart per project the user belongs to (GPUs in use against
// quota and fair share), the whole cluster's allocation and queue lengths for admins, and the
// GPU-hours CSV for cost sharing. The data is GET /history and GET /usage.csv, the same API
// the CLI and scripts use; Chart.js (static/chart.umd.min.js, MIT) draws it.

import { api, el, number } from "./common.js";
import { loadChart } from "./chartlib.js";
import { DAY, momentText, spanText, tickStep, tickLabel, timeTicks } from "./timeaxis.js";

let Chart = null; // loaded by loadChart()
const HOUR = 3600 * 1000;
const WINDOWS = {
  hour: { span: HOUR, points: 240, label: "the last hour" },
  day: { span: DAY, points: 288, label: "the last 24 hours" },
  week: { span: 7 * DAY, points: 336, label: "the last 7 days" },
};
const REFRESH_MS = 60 * 1000;
const COLOURS = {
  use: "rgb(13, 110, 253)",
  useFill: "rgba(13, 110, 253, 0.15)",
  peak: "rgba(13, 110, 253, 0.45)",
  quota: "rgb(108, 117, 125)",
  fair: "rgb(253, 126, 20)",
  queued: "rgb(220, 53, 69)",
  capacity: "rgb(25, 135, 84)",
};
const DASHES = { quota: [6, 4], fair: [2, 3] };

const chartsBox = document.getElementById("frachub-history-charts");
const rangeText = document.getElementById("frachub-history-range");
const charts = new Map(); // key -> Chart, kept across refreshes so they update in place
let windowName = "day";
let timer = null;

// The points of one field, a break (null) where the service took no sample for longer than
// a few buckets (it was stopped): a step across the gap would claim use nobody recorded.
function series(points, field, gap) {
  const out = [];
  let last = null;
  for (const point of points) {
    const x = Date.parse(point.time);
    if (last !== null && x - last > gap) out.push({ x: (x + last) / 2, y: null });
    out.push({ x, y: point[field] });
    last = x;
  }
  return out;
}

// A line drawn in steps: each bucket's value holds from the bucket before it to its own
// (last) sample, as the service measured it; no dots, but one on hover.
function line(label, data, colour, extra = {}) {
  return {
    label,
    data,
    borderColor: colour,
    backgroundColor: colour,
    borderWidth: 2,
    stepped: "before",
    pointRadius: 0,
    pointHoverRadius: 3,
    ...extra,
  };
}

// "in use": the bucket means, filled; and, when a bucket holds several samples, the most in
// use at one of them as a thin line above, so the chart shows the peak the note names.
function inUse(points, gap, aggregated, every) {
  const sets = [
    line(aggregated ? `in use (average per ${every})` : "in use", series(points, "allocated_gpus", gap), COLOURS.use, {
      fill: "origin",
      backgroundColor: COLOURS.useFill,
    }),
  ];
  if (aggregated) {
    sets.push(line(`in use (peak per ${every})`, series(points, "peak_allocated_gpus", gap), COLOURS.peak, { borderWidth: 1 }));
  }
  return sets;
}

function projectDatasets(points, gap, aggregated, every) {
  return [
    ...inUse(points, gap, aggregated, every),
    line("quota", series(points, "deserved_gpus", gap), COLOURS.quota, { borderDash: DASHES.quota }),
    line("fair share", series(points, "fair_share_gpus", gap), COLOURS.fair, { borderDash: DASHES.fair }),
  ];
}

function clusterDatasets(points, gap, aggregated, every) {
  return [
    ...inUse(points, gap, aggregated, every),
    line("cluster GPUs", series(points, "cluster_gpus", gap), COLOURS.capacity, { borderDash: DASHES.quota }),
    line("queued workloads", series(points, "pending", gap), COLOURS.queued, { yAxisID: "queue" }),
    line("running workloads", series(points, "running", gap), COLOURS.quota, { yAxisID: "queue" }),
  ];
}

function options(start, end, withQueue) {
  const scales = {
    x: {
      type: "linear",
      min: start,
      max: end,
      // the ticks are ours (timeaxis.js): round local times fitted to the window
      afterBuildTicks: (axis) => {
        axis.ticks = timeTicks(axis.min, axis.max).ticks.map((value) => ({ value }));
      },
      ticks: {
        autoSkip: false,
        maxRotation: 0,
        callback(value) {
          return tickLabel(value, tickStep(this.min, this.max)); // `this`: the axis
        },
      },
    },
    y: { beginAtZero: true, title: { display: true, text: "GPUs" } },
  };
  if (withQueue) {
    scales.queue = {
      position: "right",
      beginAtZero: true,
      grid: { drawOnChartArea: false },
      ticks: { precision: 0 },
      title: { display: true, text: "workloads" },
    };
  }
  return {
    animation: false,
    responsive: true,
    maintainAspectRatio: false,
    interaction: { mode: "index", intersect: false },
    scales,
    plugins: {
      legend: { display: false }, // the legend is HTML beside the canvas (legend() below)
      tooltip: {
        filter: (item) => item.parsed.y !== null,
        callbacks: {
          title: (items) => (items.length ? momentText(items[0].parsed.x) : ""),
          label: (item) => `${item.dataset.label}: ${number(item.parsed.y)}`,
        },
      },
    },
  };
}
// The legend in HTML beside the chart: crisp swatches at any zoom (a line with the dataset's
// dash pattern, a filled box for the filled "in use"), which Chart.js's canvas legend drew as
// dashed outlines of small boxes.
function swatch(set) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", "28");
  svg.setAttribute("height", "12");
  svg.setAttribute("aria-hidden", "true");
  svg.classList.add("frachub-legend-swatch");
  const shape = document.createElementNS("http://www.w3.org/2000/svg", set.fill ? "rect" : "line");
  if (set.fill) {
    for (const [key, value] of Object.entries({ x: 1, y: 1, width: 26, height: 10, fill: set.backgroundColor, stroke: set.borderColor, "stroke-width": 2 })) {
      shape.setAttribute(key, String(value));
    }
  } else {
    for (const [key, value] of Object.entries({ x1: 0, y1: 6, x2: 28, y2: 6, stroke: set.borderColor, "stroke-width": set.borderWidth })) {
      shape.setAttribute(key, String(value));
    }
    if (set.borderDash) shape.setAttribute("stroke-dasharray", set.borderDash.join(" "));
  }
  shape.setAttribute("shape-rendering", "crispEdges");
  svg.append(shape);
  return svg;
}

function legend(box, datasets) {
  const list = box.querySelector(".frachub-history-legend");
  list.replaceChildren(
    ...datasets.map((set) => el("li", { dataset: { label: set.label } }, swatch(set), " ", set.label)),
  );
}

function card(key, title) {
  const canvas = el("canvas", { role: "img" });
  const box = el(
    "div",
    { class: "col-md-6 frachub-history-chart", id: `frachub-history-${key}`, dataset: { key } },
    el(
      "div",
      { class: "card" },
      el(
        "div",
        { class: "card-header d-flex flex-wrap column-gap-2 align-items-baseline" },
        el("h3", { class: "h6 mb-0" }, title),
        el("span", { class: "small text-body-secondary frachub-history-note" }),
      ),
      el(
        "div",
        { class: "card-body" },
        el("div", { class: "frachub-history-canvas" }, canvas),
        el("p", { class: "small text-body-secondary mb-0 d-none frachub-history-empty", role: "status" }),
        el("ul", { class: "frachub-history-legend small text-body-secondary mb-0" }),
      ),
    ),
  );
  return { box, canvas };
}

// What a chart with fewer than two points says instead of drawing a lone dot.
function collecting(points, interval) {
  const every = interval > 0 ? `every ${spanText(interval * 1000)}` : "when sampling is on (usage_sample_interval)";
  if (!points.length) return `No samples in ${WINDOWS[windowName].label} yet: data is being collected (a sample ${every}).`;
  return `Data is being collected: one sample so far (${momentText(Date.parse(points[0].time))}, ${number(points[0].allocated_gpus)} in use); the chart draws from the second (a sample ${every}).`;
}

function draw(key, title, note, points, datasets, start, end, withQueue, interval) {
  let chart = charts.get(key);
  let box = document.getElementById(`frachub-history-${key}`);
  if (!chart) {
    const made = card(key, title);
    box = made.box;
    chartsBox.append(box);
    chart = new Chart(made.canvas, { type: "line", data: { datasets }, options: options(start, end, withQueue) });
    charts.set(key, chart);
  } else {
    chart.data.datasets = datasets;
    chart.options.scales.x.min = start;
    chart.options.scales.x.max = end;
    chart.update();
  }
  chart.canvas.setAttribute("aria-label", `${title}: ${note || "no samples"}, over ${WINDOWS[windowName].label}`);
  const drawn = points.length >= 2;
  box.querySelector(".frachub-history-note").textContent = note;
  box.querySelector(".frachub-history-canvas").classList.toggle("d-none", !drawn);
  box.querySelector(".frachub-history-legend").classList.toggle("d-none", !drawn);
  const empty = box.querySelector(".frachub-history-empty");
  empty.classList.toggle("d-none", drawn);
  empty.textContent = drawn ? "" : collecting(points, interval);
  legend(box, datasets);
}

// The header's words: the peak is the most in use at one sample and the average the mean of
// all samples in the window, as the service summed them up (not the largest bucket mean).
function projectNote(summary, points) {
  if (!summary) return "";
  const last = points[points.length - 1];
  return `peak ${number(summary.peak_allocated_gpus)} · average ${number(summary.average_allocated_gpus)} in use · quota ${number(last.deserved_gpus)}`;
}

function clusterNote(summary, points) {
  if (!summary) return "";
  const last = points[points.length - 1];
  const queued = summary.peak_pending ? `up to ${summary.peak_pending} queued` : "none queued";
  return `peak ${number(summary.peak_allocated_gpus)} · average ${number(summary.average_allocated_gpus)} of ${number(last.cluster_gpus)} GPUs in use · ${queued}`;
}

function rangeWords(history, every, aggregated) {
  const interval = spanText(history.sample_interval_seconds * 1000);
  const points = aggregated ? `one point per ${every}` : `one point per sample (every ${interval})`;
  const words = [`${WINDOWS[windowName].label}, ${points}`];
  if (history.recorded_since) words.push(`recorded since ${momentText(Date.parse(history.recorded_since))}`);
  else words.push("nothing recorded yet");
  return words.join("; ");
}

async function refresh() {
  const { span, points } = WINDOWS[windowName];
  const end = Date.now();
  const start = end - span;
  const query = new URLSearchParams({
    start: new Date(start).toISOString(),
    end: new Date(end).toISOString(),
    points: String(points),
  });
  const history = await api(`history?${query}`);
  // a young service: the axis starts where the recording did, not hours of nothing before it
  const since = history.recorded_since ? Date.parse(history.recorded_since) : start;
  const from = Math.max(start, since);
  const step = history.step_seconds * 1000;
  const interval = history.sample_interval_seconds;
  const every = spanText(step);
  const aggregated = step > 1.5 * interval * 1000;
  const gap = Math.max(5 * Math.max(step, interval * 1000), 2 * 60 * 1000);
  rangeText.textContent = rangeWords(history, every, aggregated);
  const wanted = new Set();
  if (history.cluster) {
    wanted.add("cluster");
    const sets = clusterDatasets(history.cluster, gap, aggregated, every);
    draw("cluster", "Whole cluster", clusterNote(history.cluster_summary, history.cluster), history.cluster, sets, from, end, true, interval);
  }
  for (const { project, points: projectPoints, summary } of history.projects) {
    const key = `project-${project}`;
    wanted.add(key);
    const sets = projectDatasets(projectPoints, gap, aggregated, every);
    draw(key, project, projectNote(summary, projectPoints), projectPoints, sets, from, end, false, interval);
  }
  for (const [key, chart] of charts) {
    if (!wanted.has(key)) {
      chart.destroy();
      charts.delete(key);
      document.getElementById(`frachub-history-${key}`)?.remove();
    }
  }
  if (!wanted.size && !chartsBox.querySelector(".frachub-history-none")) {
    chartsBox.append(el("p", { class: "small text-body-secondary frachub-history-none" }, "You are in no project, so there is no usage to chart."));
  }
  chartsBox.dataset.loaded = windowName;
}

async function round() {
  clearTimeout(timer);
  try {
    await refresh();
  } catch (error) {
    rangeText.textContent = `history unavailable: ${error.message}`;
  }
  timer = setTimeout(round, REFRESH_MS);
}

for (const input of document.querySelectorAll("input[name='frachub-history-window']")) {
  input.addEventListener("change", () => {
    windowName = input.value;
    delete chartsBox.dataset.loaded;
    if (Chart) round();
  });
}

// -- the CSV of GPU-hours -------------------------------------------------------------------

const form = document.getElementById("frachub-csv-form");
const startInput = document.getElementById("frachub-csv-start");
const endInput = document.getElementById("frachub-csv-end");
const csvStatus = document.getElementById("frachub-csv-status");

function dateText(date) {
  return date.toISOString().slice(0, 10);
}

const today = new Date();
endInput.value = dateText(today);
startInput.value = dateText(new Date(Date.UTC(today.getUTCFullYear(), today.getUTCMonth(), 1)));

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  csvStatus.className = "col-auto small";
  csvStatus.textContent = "";
  if (!startInput.value || !endInput.value) {
    csvStatus.className = "col-auto small text-danger";
    csvStatus.textContent = "choose both dates";
    return;
  }
  // whole UTC days, the end day included
  const start = `${startInput.value}T00:00:00Z`;
  const end = new Date(Date.parse(`${endInput.value}T00:00:00Z`) + 24 * HOUR).toISOString();
  try {
    const text = await api(`usage.csv?${new URLSearchParams({ start, end })}`);
    const url = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
    const link = el("a", { href: url, download: `frachub-usage-${startInput.value}-${endInput.value}.csv` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
    const rows = text.trim().split(/\r?\n/).length - 1;
    csvStatus.textContent = `downloaded ${rows} ${rows === 1 ? "row" : "rows"}`;
  } catch (error) {
    csvStatus.className = "col-auto small text-danger";
    csvStatus.textContent = error.message;
  }
});

loadChart().then(
  (loaded) => {
    Chart = loaded;
    round();
  },
  (error) => {
    rangeText.textContent = `history unavailable: the chart library did not load (${error.message || error})`;
  },
);
