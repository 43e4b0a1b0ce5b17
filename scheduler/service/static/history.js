// The panel's usage history: one chart per project the user belongs to (GPUs in use against
// quota and fair share), the whole cluster's allocation and queue lengths for admins, and the
// GPU-hours CSV for cost sharing. The data is GET /history and GET /usage.csv, the same API
// the CLI and scripts use; Chart.js (static/chart.umd.min.js, MIT) draws it.

import { api, el, isAdmin, number } from "./common.js";

let Chart = null; // loaded by loadChart()
const HOUR = 3600 * 1000;
const WINDOWS = {
  hour: { span: HOUR, points: 240, label: "the last hour" },
  day: { span: 24 * HOUR, points: 288, label: "the last 24 hours" },
  week: { span: 7 * 24 * HOUR, points: 336, label: "the last 7 days" },
};
const REFRESH_MS = 60 * 1000;
const COLOURS = {
  use: "rgb(13, 110, 253)",
  quota: "rgb(108, 117, 125)",
  fair: "rgb(253, 126, 20)",
  queued: "rgb(220, 53, 69)",
  capacity: "rgb(25, 135, 84)",
};

const chartsBox = document.getElementById("frachub-history-charts");
const rangeText = document.getElementById("frachub-history-range");
const charts = new Map(); // key -> Chart, kept across refreshes so they update in place
let windowName = "day";
let timer = null;

function series(points, field) {
  return points.map((point) => ({ x: Date.parse(point.time), y: point[field] }));
}

function line(label, data, colour, extra = {}) {
  return {
    label,
    data,
    borderColor: colour,
    backgroundColor: colour,
    borderWidth: 2,
    pointRadius: data.length < 30 ? 3 : 0, // a few points (a young service) stay visible
    ...extra,
  };
}

// the filled "in use" line both charts start with
function inUse(points) {
  return line("in use", series(points, "allocated_gpus"), COLOURS.use, {
    fill: "origin",
    backgroundColor: "rgba(13, 110, 253, 0.15)",
  });
}

function projectDatasets(points) {
  return [
    inUse(points),
    line("quota", series(points, "deserved_gpus"), COLOURS.quota, { borderDash: [6, 4] }),
    line("fair share", series(points, "fair_share_gpus"), COLOURS.fair, { borderDash: [2, 3] }),
  ];
}

function clusterDatasets(points) {
  return [
    inUse(points),
    line("cluster GPUs", series(points, "cluster_gpus"), COLOURS.capacity, { borderDash: [6, 4] }),
    line("queued workloads", series(points, "pending"), COLOURS.queued, { yAxisID: "queue" }),
    line("running workloads", series(points, "running"), COLOURS.quota, { yAxisID: "queue" }),
  ];
}

function tickLabel(value) {
  const date = new Date(value);
  const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (windowName !== "week") return time;
  return `${date.toLocaleDateString([], { weekday: "short" })} ${time}`;
}

function options(start, end, withQueue) {
  const scales = {
    x: { type: "linear", min: start, max: end, ticks: { callback: tickLabel, maxTicksLimit: 8 } },
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
      legend: { position: "bottom", labels: { boxWidth: 12 } },
      tooltip: {
        callbacks: {
          title: (items) => (items.length ? new Date(items[0].parsed.x).toLocaleString() : ""),
          label: (item) => `${item.dataset.label}: ${number(item.parsed.y)}`,
        },
      },
    },
  };
}

function card(key, title, note) {
  const canvas = el("canvas", { "aria-label": `${title}: usage over ${WINDOWS[windowName].label}`, role: "img" });
  const box = el(
    "div",
    { class: "col-md-6 frachub-history-chart", id: `frachub-history-${key}`, dataset: { key } },
    el(
      "div",
      { class: "card" },
      el(
        "div",
        { class: "card-header d-flex gap-2 align-items-baseline" },
        el("h3", { class: "h6 mb-0" }, title),
        el("span", { class: "small text-body-secondary frachub-history-note" }, note),
      ),
      el(
        "div",
        { class: "card-body" },
        el("div", { class: "frachub-history-canvas" }, canvas),
        el("p", { class: "small text-body-secondary mb-0 d-none frachub-history-empty" }, "No samples in this period yet."),
      ),
    ),
  );
  return { box, canvas };
}

function draw(key, title, note, points, datasets, start, end, withQueue) {
  let chart = charts.get(key);
  let box = document.getElementById(`frachub-history-${key}`);
  if (!chart) {
    const made = card(key, title, note);
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
  box.querySelector(".frachub-history-note").textContent = note;
  box.querySelector(".frachub-history-empty").classList.toggle("d-none", points.length > 0);
}

function peak(points, field) {
  return Math.max(...points.map((point) => point[field]));
}

function projectNote(points) {
  if (!points.length) return "";
  const last = points[points.length - 1];
  return `peak ${number(peak(points, "allocated_gpus"))} in use, quota ${number(last.deserved_gpus)}`;
}

function clusterNote(points) {
  if (!points.length) return "";
  const last = points[points.length - 1];
  return `peak ${number(peak(points, "allocated_gpus"))} of ${number(last.cluster_gpus)} GPUs in use, up to ${peak(points, "pending")} queued`;
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
  // a young service: the axis starts at the first sample rather than hours of nothing
  const times = [...(history.cluster || []), ...history.projects.flatMap((item) => item.points)].map(
    (point) => Date.parse(point.time),
  );
  const first = times.length ? Math.min(...times) : start;
  const from = first - start > span / 10 ? first - 60 * 1000 : start;
  const step = history.step_seconds;
  const every = step < 60 ? `${Math.round(step)} s` : `${Math.round(step / 60)} min`;
  const since = from > start ? `; recorded since ${new Date(first).toLocaleString()}` : "";
  rangeText.textContent = `${WINDOWS[windowName].label}, one point per ${every}${since}`;
  const wanted = new Set();
  if (history.cluster) {
    wanted.add("cluster");
    draw("cluster", "Whole cluster", clusterNote(history.cluster), history.cluster, clusterDatasets(history.cluster), from, end, true);
  }
  for (const { project, points: projectPoints } of history.projects) {
    const key = `project-${project}`;
    wanted.add(key);
    draw(key, project, projectNote(projectPoints), projectPoints, projectDatasets(projectPoints), from, end, false);
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

// The hub's page loads RequireJS, and a UMD file under RequireJS registers itself as an
// anonymous AMD module instead of setting window.Chart: load it through RequireJS then.
function loadChart() {
  const src = document.getElementById("frachub-history").dataset.chartSrc;
  return new Promise((resolve, reject) => {
    if (window.Chart) {
      resolve(window.Chart);
    } else if (typeof window.define === "function" && window.define.amd && window.require) {
      window.require([src], resolve, reject);
    } else {
      const script = el("script", { src });
      script.addEventListener("load", () => resolve(window.Chart));
      script.addEventListener("error", () => reject(new Error(`cannot load ${src}`)));
      document.head.append(script);
    }
  });
}

loadChart().then(
  (loaded) => {
    Chart = loaded;
    window.Chart ??= loaded; // for the browser tests and the console: Chart.getChart(canvas)
    round();
  },
  (error) => {
    rangeText.textContent = `history unavailable: the chart library did not load (${error.message || error})`;
  },
);
