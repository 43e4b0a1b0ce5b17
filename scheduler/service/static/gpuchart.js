// The job details' live GPU chart: a running workload's utilization and the memory its
// processes hold against its share's memory, from GET /workloads/{id}/gpu (the samples the
// service keeps in memory while it runs: GpuMetrics.history_seconds, 15 min by default),
// redrawn in place every few seconds. Chart.js draws it (chartlib.js).

import { api } from "./common.js";
import { loadChart } from "./chartlib.js";
import { tickLabel, tickStep, timeTicks } from "./timeaxis.js";

const REFRESH_MS = 2000;
const GIB = 2 ** 30;
const COLOURS = {
  busy: "rgb(13, 110, 253)",
  busyFill: "rgba(13, 110, 253, 0.12)",
  memory: "rgb(25, 135, 84)",
  share: "rgb(108, 117, 125)",
};

const box = document.getElementById("frachub-gpu-use");
const summary = document.getElementById("frachub-gpu-use-summary");
const canvas = document.getElementById("frachub-gpu-chart");
let shown = null; // {id, at (ms of the last fetch)}
let chart = null;

const WHOSE = {
  processes: "its own processes",
  gpu: "the whole GPU's: NVML gives no per-process figure, so neighbours count",
};

// "37% busy (its own processes) · 12.3 of 40 GiB in use": the last sample in words.
export function gpuUseText(use) {
  if (!use) return null;
  const busy =
    use.utilization_percent === null ? "utilization unknown" : `${Math.round(use.utilization_percent)}% busy (${WHOSE[use.utilization_of] || "?"})`;
  const used = (use.memory_bytes / GIB).toFixed(1);
  const share = Math.round((use.share_memory_bytes / GIB) * 10) / 10;
  return `${busy} · ${used} of ${share} GiB in use`;
}

function options(series) {
  const xs = series.samples.map((sample) => Date.parse(sample.at));
  const max = xs.length ? xs[xs.length - 1] : Date.now();
  const min = Math.min(xs.length ? xs[0] : max, max - 10 * 1000); // at least 10 s wide
  return {
    animation: false,
    responsive: true,
    maintainAspectRatio: false,
    interaction: { mode: "index", intersect: false },
    plugins: { legend: { labels: { boxWidth: 14, boxHeight: 2 } } },
    scales: {
      x: {
        type: "linear",
        min,
        max,
        afterBuildTicks: (axis) => {
          axis.ticks = timeTicks(axis.min, axis.max, 5).ticks.map((value) => ({ value }));
        },
        ticks: {
          autoSkip: false,
          maxRotation: 0,
          callback(value) {
            return tickLabel(value, tickStep(this.min, this.max, 5));
          },
        },
      },
      busy: { position: "left", min: 0, max: 100, title: { display: true, text: "GPU %" } },
      memory: {
        position: "right",
        min: 0,
        suggestedMax: (series.share_memory_bytes || 0) / GIB,
        grid: { drawOnChartArea: false },
        title: { display: true, text: "GiB" },
      },
    },
  };
}

function datasets(series) {
  const points = (field, scale = 1) =>
    series.samples.map((sample) => ({ x: Date.parse(sample.at), y: sample[field] === null ? null : sample[field] / scale }));
  const share = (series.share_memory_bytes || 0) / GIB;
  const xs = series.samples.map((sample) => Date.parse(sample.at));
  const line = (label, data, colour, axis, extra = {}) => ({
    label,
    data,
    yAxisID: axis,
    borderColor: colour,
    backgroundColor: colour,
    borderWidth: 2,
    pointRadius: 0,
    pointHoverRadius: 3,
    ...extra,
  });
  const whole = series.utilization_of === "gpu" ? " (whole GPU)" : "";
  return [
    line(`utilization %${whole}`, points("utilization_percent"), COLOURS.busy, "busy", { fill: "origin", backgroundColor: COLOURS.busyFill }),
    line("memory in use (GiB)", points("memory_bytes", GIB), COLOURS.memory, "memory"),
    line(
      "share's memory (GiB)",
      xs.length ? [{ x: xs[0], y: share }, { x: xs[xs.length - 1], y: share }] : [],
      COLOURS.share,
      "memory",
      { borderDash: [6, 4], borderWidth: 1.5 },
    ),
  ];
}

async function draw(id) {
  const series = await api(`workloads/${id}/gpu`);
  if (!shown || shown.id !== id) return;
  if (!series.sampling) {
    summary.textContent = "not sampled here (no NVML on this machine, or sampling is off)";
    canvas.parentElement.classList.add("d-none");
    return;
  }
  if (!series.samples.length) {
    summary.textContent = "Collecting the first samples of its GPU use…";
    canvas.parentElement.classList.add("d-none");
    return;
  }
  canvas.parentElement.classList.remove("d-none");
  const Chart = await loadChart();
  if (chart && chart.canvas === canvas) {
    chart.data.datasets = datasets(series);
    chart.options = options(series);
    chart.update("none");
  } else {
    chart = new Chart(canvas, { type: "line", data: { datasets: datasets(series) }, options: options(series) });
  }
}

// Show (or hide) the chart for the workload in the details card; called at every poll.
export function showGpuUse(workload) {
  const running = workload && workload.state === "running" && workload.placement && workload.placement.length;
  box.classList.toggle("d-none", !running);
  if (!running) {
    shown = null;
    return;
  }
  if (workload.gpu_usage) summary.textContent = gpuUseText(workload.gpu_usage);
  const now = Date.now();
  if (shown && shown.id === workload.id && now - shown.at < REFRESH_MS) return;
  if (!shown || shown.id !== workload.id) {
    summary.textContent = gpuUseText(workload.gpu_usage) || "";
    if (chart) {
      chart.destroy();
      chart = null;
    }
  }
  shown = { id: workload.id, at: now };
  draw(workload.id).catch((error) => {
    summary.textContent = `GPU use unavailable: ${error.message}`;
  });
}
