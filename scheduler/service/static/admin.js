// The admin page: the GPU map (which share of each GPU is held by whom), the queue tree
// with quotas, use and fair share, and every active workload with a cancel button.
import {
  CANCELLABLE,
  PAGINATION,
  api,
  cancelButton,
  el,
  every,
  gpusText,
  number,
  stateBadge,
  timeCell,
  whereCell,
} from "./common.js";

const POLL_MS = 2000;

function holderLabel(holder) {
  return holder.user || holder.project;
}

// Ten hues far apart on the colour wheel, each dark enough for the shares' white text
// (Tailwind's 700 shades); beyond ten holders, golden-angle hues.
const PALETTE = ["#1d4ed8", "#c2410c", "#15803d", "#7e22ce", "#b91c1c", "#0e7490", "#a16207", "#be185d", "#4d7c0f", "#475569"];

// A colour per holder on the map, by the holders' sorted names: any two holders shown at
// once get different palette entries (a hash of the name let "alice" and "bob" come out
// nearly the same teal), and a holder keeps its colour on every GPU and in the legend.
// What each sharing mode enforces, in the words of docs/gpu-sharing.md (the node's tooltip).
const SHARING = {
  cooperative: "PyTorch and JAX are capped at their share; other CUDA programs are not",
  mps: "NVIDIA MPS: the driver holds every CUDA program on a shared GPU to its share's memory and compute",
};

function coloursFor(labels) {
  const sorted = [...new Set(labels)].sort();
  return new Map(
    sorted.map((label, i) => [label, i < PALETTE.length ? PALETTE[i] : `hsl(${Math.round((i * 137.508) % 360)} 55% 42%)`]),
  );
}

const GIB_TEXT = (value) => (value === null || value === undefined ? "?" : `${Math.round(value * 10) / 10}`);

// A share's use at the last sample: "12.3/40 GiB · 37%"; "" before one.
function shareUse(holder) {
  if (holder.memory_used_gib === null || holder.memory_used_gib === undefined) return "";
  const busy = holder.utilization_percent === null ? "" : ` · ${Math.round(holder.utilization_percent)}%`;
  return `${GIB_TEXT(holder.memory_used_gib)}/${GIB_TEXT(holder.share_memory_gib)} GiB${busy}`;
}

// The GPU's own figures at the last sample, beside its bar: a utilization meter, memory in
// use, temperature and power ("not sampled" where nothing reads them).
function gpuReading(gpu) {
  if (gpu.sampled_at === null || gpu.sampled_at === undefined) {
    return el("span", { class: "frachub-gpu-reading small text-body-secondary" }, "not sampled");
  }
  const percent = gpu.utilization_percent;
  const parts = [
    percent === null ? "util ?" : `${percent}%`,
    `${GIB_TEXT(gpu.memory_used_gib)}/${GIB_TEXT(gpu.memory_gib)} GiB`,
    gpu.temperature_c === null ? null : `${gpu.temperature_c}°C`,
    gpu.power_watts === null ? null : `${Math.round(gpu.power_watts)} W`,
  ].filter(Boolean);
  return el(
    "span",
    {
      class: "frachub-gpu-reading small text-nowrap",
      title: `GPU ${gpu.index} at ${new Date(gpu.sampled_at).toLocaleTimeString()}: utilization, memory in use, temperature, power`,
      dataset: { utilization: percent === null ? "" : percent },
    },
    el("span", { class: "frachub-util-meter", role: "img", "aria-label": `utilization ${percent ?? "?"}%` }, el("span", { style: { width: `${percent || 0}%` } })),
    ` ${parts.join(" · ")}`,
  );
}

function renderNodes(nodes) {
  const container = document.getElementById("frachub-nodes");
  const legend = new Map();
  const colours = coloursFor(nodes.flatMap((node) => node.gpus.flatMap((gpu) => gpu.holders.map(holderLabel))));
  const colour = (label) => colours.get(label);
  if (!nodes.length) {
    container.replaceChildren(el("p", { class: "text-body-secondary" }, "No nodes."));
    return;
  }
  container.replaceChildren(
    ...nodes.map((node) =>
      el(
        "div",
        { class: "card mb-3 frachub-node", dataset: { node: node.name } },
        el(
          "div",
          { class: "card-header small" },
          el("strong", {}, node.name),
          ` · ${node.gpu_count} × ${node.gpu_model || "GPU"} · ${number(node.gpu_memory_gib)} GiB each`,
          node.gpu_sharing ? el("span", { class: "frachub-sharing", title: SHARING[node.gpu_sharing] || "" }, ` · sharing: ${node.gpu_sharing}`) : "",
        ),
        el(
          "div",
          { class: "card-body py-2" },
          ...node.gpus.map((gpu) => {
            const free = Math.max(0, 1 - gpu.used);
            return el(
              "div",
              { class: "frachub-gpu d-flex align-items-center gap-2 mb-1", dataset: { node: node.name, gpu: gpu.index } },
              el("span", { class: "frachub-gpu-name small text-nowrap", title: gpu.uuid || "" }, `GPU ${gpu.index}`),
              el(
                "div",
                { class: "frachub-gpu-bar", role: "img", "aria-label": `GPU ${gpu.index}: ${number(gpu.used)} used` },
                ...gpu.holders.map((holder) => {
                  const label = holderLabel(holder);
                  legend.set(label, holder.user ? "user" : "project");
                  const what = holder.workload
                    ? `#${holder.workload} ${holder.name || ""} (${holder.state})`
                    : holder.state;
                  const use = shareUse(holder);
                  const borrowed = holder.borrowed ? " · borrowed: beyond its project's quota, may be reclaimed" : "";
                  return el(
                    "div",
                    {
                      class: `frachub-share${holder.borrowed ? " frachub-borrowed" : ""}`,
                      style: { width: `${holder.share * 100}%`, background: colour(label) },
                      title: `${label} · ${holder.project} · ${holder.kind} · ${what} · ${number(holder.share)} GPU${use ? ` · ${use}` : ""}${borrowed}`,
                      dataset: {
                        user: holder.user || "",
                        project: holder.project,
                        share: holder.share,
                        workload: holder.workload || "",
                        borrowed: holder.borrowed ? "true" : "false",
                      },
                    },
                    `${holder.borrowed ? "⇄ " : ""}${label} ${number(holder.share)}${use ? ` · ${use}` : ""}`,
                  );
                }),
                free > 0.0005
                  ? el("div", { class: "frachub-free", style: { width: `${free * 100}%` } }, `free ${number(free)}`)
                  : null,
              ),
              gpuReading(gpu),
            );
          }),
        ),
      ),
    ),
  );
  const borrowing = nodes.some((node) => node.gpus.some((gpu) => gpu.holders.some((holder) => holder.borrowed)));
  document.getElementById("frachub-legend").replaceChildren(
    ...[...legend.keys()].sort().map((label) =>
      el("span", { class: "me-3 text-nowrap" }, el("span", { class: "frachub-swatch", style: { background: colour(label) } }), ` ${label}`),
    ),
    borrowing
      ? el(
          "span",
          { class: "me-3 text-nowrap", id: "frachub-legend-borrowed" },
          el("span", { class: "frachub-swatch frachub-borrowed", style: { background: "#475569" } }),
          " ⇄ borrowed: beyond its project's quota, may be reclaimed",
        )
      : "",
  );
}

function renderQueues(queues) {
  const byName = new Map(queues.map((queue) => [queue.name, queue]));
  const depth = (queue) => (queue.parent && byName.has(queue.parent) ? 1 + depth(byName.get(queue.parent)) : 0);
  const ordered = [];
  const visit = (queue) => {
    ordered.push(queue);
    for (const child of queue.children) if (byName.has(child)) visit(byName.get(child));
  };
  for (const queue of queues) if (!queue.parent || !byName.has(queue.parent)) visit(queue);
  document.querySelector("#frachub-queues-table tbody").replaceChildren(
    ...ordered.map((queue) =>
      el(
        "tr",
        { class: "frachub-queue", dataset: { queue: queue.name } },
        el("th", { scope: "row", style: { paddingLeft: `${0.25 + depth(queue) * 1.25}rem` } }, queue.name),
        el("td", {}, number(queue.deserved_gpus)),
        el("td", {}, number(queue.limit_gpus)),
        el("td", {}, number(queue.over_quota_weight)),
        el("td", {}, number(queue.allocated_gpus)),
        el(
          "td",
          { class: "frachub-fair-share" },
          number(queue.fair_share_gpus),
          queue.fair_share_note ? el("div", { class: "small text-body-secondary frachub-fair-share-note" }, queue.fair_share_note) : null,
        ),
        el("td", { class: "frachub-recent-use" }, queue.usage === null || queue.usage === undefined ? "—" : `${Math.round(queue.usage * 100)}%`),
        el("td", {}, queue.running),
        el("td", {}, queue.pending),
        el("td", { class: "frachub-queue-cpu" }, hostText(queue, "cpu", "cpu")),
        el("td", { class: "frachub-queue-memory" }, hostText(queue, "memory_gib", "memory_gib")),
      ),
    ),
  );
}

// A queue's CPUs (cores) or memory (GiB) by quota (docs/scheduling.md, rule 3b): what it
// holds, then its quota and limit; "—" while no queue has a quota for the resource.
function hostText(queue, suffix, field) {
  const inUse = queue[`allocated_${suffix}`];
  if (inUse === null || inUse === undefined) return "—";
  const quota = queue[`deserved_${field}`];
  const limit = queue[`limit_${field}`];
  const parts = [`${number(inUse)} in use`, `fair ${number(queue[`fair_share_${suffix}`])}`];
  parts.push(quota === null ? "no quota" : `quota ${number(quota)}`);
  if (limit !== null) parts.push(`limit ${number(limit)}`);
  return parts.join(" · ");
}

let refresh = () => {};

// The newest ACTIVE_SHOWN active workloads, and how many there are in all: a queue of
// thousands stays one request and a table a browser can redraw every two seconds.
const ACTIVE_SHOWN = 500;

function renderActive(page) {
  const workloads = page.items;
  const total = page._pagination.total;
  const body = document.querySelector("#frachub-active-table tbody");
  if (!workloads.length) {
    body.replaceChildren(el("tr", {}, el("td", { colspan: 8, class: "text-body-secondary" }, "Nothing is running or waiting.")));
    return;
  }
  const more =
    total > workloads.length
      ? el(
          "tr",
          { class: "frachub-active-more" },
          el("td", { colspan: 8, class: "text-body-secondary small" }, `The newest ${workloads.length} of ${total} active workloads; frachub jobs --all-users lists every one.`),
        )
      : null;
  body.replaceChildren(
    ...workloads.map((workload) =>
      el(
        "tr",
        { class: "frachub-workload", dataset: { id: workload.id, state: workload.state } },
        el("td", { class: "text-body-secondary" }, workload.id),
        el("td", {}, workload.user),
        el("td", {}, workload.name, workload.kind === "interactive" ? el("span", { class: "badge text-bg-info ms-1" }, "notebook") : null),
        el("td", {}, workload.project),
        el("td", {}, stateBadge(workload.state)),
        el("td", { class: "text-nowrap" }, gpusText(workload)),
        whereCell(workload),
        el(
          "td",
          { class: "text-end" },
          workload.kind !== "interactive" && CANCELLABLE.has(workload.state)
            ? cancelButton(workload, () => refresh())
            : null,
        ),
      ),
    ),
    ...(more ? [more] : []),
  );
}

refresh = every(POLL_MS, async () => {
  const [nodes, queues, workloads] = await Promise.all([
    api("nodes"),
    api("queues"),
    api(`workloads?active=1&limit=${ACTIVE_SHOWN}`, { accept: PAGINATION }),
  ]);
  renderNodes(nodes);
  renderQueues(queues);
  renderActive(workloads);
});
