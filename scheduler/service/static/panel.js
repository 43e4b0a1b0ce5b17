// The Training panel: the user's jobs and notebooks (state, placement, why and where they
// wait), one workload's details and live log, the submit form, and the user's projects.
import {
  ACTIVE,
  CANCELLABLE,
  State,
  api,
  cancelButton,
  clearError,
  el,
  every,
  gpusText,
  isAdmin,
  listAll,
  me,
  number,
  placementText,
  plural,
  resourcesText,
  showError,
  stateBadge,
  stream,
  timeCell,
  whereCell,
} from "./common.js";
import { showGpuUse } from "./gpuchart.js";

const POLL_MS = 1500;

const LOG_LIMIT = 512 * 1024; // characters kept on screen; older lines drop off the top

const table = document.querySelector("#frachub-workloads-table tbody");
const idleWarnings = document.getElementById("frachub-idle-warnings");
const detail = document.getElementById("frachub-detail");
const logBox = document.getElementById("frachub-log");
const logStatus = document.getElementById("frachub-log-status");
const replicaSelect = document.getElementById("frachub-replica");
const form = document.getElementById("frachub-submit-form");
const projectSelect = document.getElementById("frachub-project");
const gpuSelect = document.getElementById("frachub-gpus");
const submitStatus = document.getElementById("frachub-submit-status");

let workloads = [];
let selected = null; // id of the workload shown in the detail card
let following = null; // {id, replica, controller} of the log being streamed
let userInfo = null;

// -- the workload list -------------------------------------------------------------------

async function loadWorkloads() {
  // the newest 50 whatever their state, and every active one however old: "yours" in the
  // projects table is counted from them, and each can be cancelled here
  const user = encodeURIComponent(me);
  const [recent, active, allocations] = await Promise.all([
    api(`workloads?user=${user}&limit=50`),
    listAll(`workloads?user=${user}&active=1&limit=500`),
    listAll(`allocations?state=${State.PENDING},${State.RUNNING}&limit=500`),
  ]);
  // the allocation view may carry more (idle_timeout_seconds, idle_stop_at, idle_warning)
  const byId = new Map([...recent, ...active].map((workload) => [workload.id, workload]));
  for (const allocation of allocations) {
    byId.set(allocation.id, { ...byId.get(allocation.id), ...allocation });
  }
  workloads = [...byId.values()].sort((a, b) => b.id - a.id);
  renderIdleWarnings();
  renderWorkloads();
  renderDetail();
}

function isNotebook(workload) {
  return workload.kind === "interactive" || workload.command === undefined;
}

function renderIdleWarnings() {
  idleWarnings.replaceChildren(
    ...workloads
      .filter((workload) => workload.idle_warning && ACTIVE.has(workload.state))
      .map((workload) =>
        el(
          "div",
          { class: "alert alert-warning frachub-idle-warning", role: "alert", dataset: { id: workload.id } },
          el("strong", {}, `Notebook ${workload.server_name ? `“${workload.server_name}”` : workload.name}: `),
          workload.idle_warning,
          workload.idle_stop_at
            ? el("span", { class: "ms-1 text-nowrap" }, `(stops at ${new Date(workload.idle_stop_at).toLocaleTimeString()})`)
            : null,
        ),
      ),
  );
}

function renderWorkloads() {
  if (!workloads.length) {
    table.replaceChildren(
      el("tr", { class: "frachub-empty" }, el("td", { colspan: 8, class: "text-body-secondary" }, "Nothing yet: submit a job on the right, or start a notebook with a GPU from the hub's home page.")),
    );
    return;
  }
  table.replaceChildren(
    ...workloads.map((workload) => {
      const notebook = isNotebook(workload);
      const row = el(
        "tr",
        {
          class: `frachub-workload${workload.id === selected ? " table-active" : ""}`,
          dataset: { id: workload.id, state: workload.state },
          onclick: () => select(workload.id),
        },
        el("td", { class: "text-body-secondary" }, workload.id),
        el(
          "td",
          {},
          el("a", { href: `#workload-${workload.id}`, class: "frachub-name" }, workload.name || `job ${workload.id}`),
          notebook ? el("span", { class: "badge text-bg-info ms-1" }, "notebook") : null,
          preemptibleBadge(workload, notebook),
          workload.kind === "inference" ? el("span", { class: "badge text-bg-info ms-1" }, "inference") : null,
          workload.idle_warning ? el("span", { class: "ms-1", title: workload.idle_warning }, "⚠") : null,
          borrowedBadge(workload),
        ),
        el("td", {}, workload.project),
        el("td", {}, stateBadge(workload.state)),
        el(
          "td",
          { class: "text-nowrap" },
          gpusText(workload),
          resourcesText(workload)
            ? el("div", { class: "small text-body-secondary frachub-resources" }, resourcesText(workload))
            : null,
        ),
        whereCell(workload),
        timeCell(workload.submitted_at),
        el(
          "td",
          { class: "text-end" },
          !notebook && CANCELLABLE.has(workload.state)
            ? cancelButton(workload, () => refresh())
            : null,
        ),
      );
      return row;
    }),
  );
}

// -- one workload: facts and live log ----------------------------------------------------

function select(id) {
  selected = id;
  renderWorkloads();
  renderDetail();
  detail.scrollIntoView({ block: "nearest" });
}

// A #workload-N link (a row's name, one copied or bookmarked) opens that workload's details,
// on load as on a change of the hash.
function hashedWorkload() {
  const match = /^#workload-(\d+)$/.exec(window.location.hash);
  return match ? Number(match[1]) : null;
}
window.addEventListener("hashchange", () => {
  const id = hashedWorkload();
  if (id !== null) select(id);
});

document.getElementById("frachub-detail-close").addEventListener("click", () => {
  selected = null;
  if (window.location.hash) history.replaceState(null, "", window.location.pathname + window.location.search);
  stopFollowing();
  renderWorkloads();
  renderDetail();
});

// A preemptible notebook (its profile's rule, or started so rather than wait at its project's
// quota): the title says what may happen to it.
function preemptibleBadge(workload, notebook) {
  if (!notebook || !workload.preemptible) return null;
  return el(
    "span",
    {
      class: "badge text-bg-secondary ms-1 frachub-preemptible",
      title: "Preemptible: it may be stopped when others need their quota (its GPU share revoked, the notebook stopped; your files are kept).",
    },
    "preemptible",
  );
}

// A running workload beyond its project's quota: it may be preempted; the title says by whom.
function borrowedBadge(workload) {
  if (!workload.borrowed) return null;
  return el("span", { class: "badge text-bg-warning ms-1 frachub-borrowed", title: workload.borrowed }, "borrowed");
}

// Why it waits: the headline a researcher reads first, the engine's full reason behind a toggle.
function waitingFact(workload) {
  const headline = workload.pending_headline || workload.pending_reason;
  if (!headline) return null;
  if (!workload.pending_reason || workload.pending_reason === headline) return headline;
  return el(
    "details",
    { class: "frachub-why" },
    el("summary", {}, headline),
    el("div", { class: "frachub-why-detail text-body-secondary" }, workload.pending_reason),
  );
}

// The workload's history in words, oldest first, as `frachub describe` and its log show it.
let timelineFor = null; // {id, events}
async function loadTimeline(id) {
  try {
    const workload = await api(`workloads/${id}`);
    if (selected === id) {
      timelineFor = { id, events: workload.events || [] };
      renderTimeline();
    }
  } catch (error) {
    showError(error);
  }
}

function renderTimeline() {
  const list = document.getElementById("frachub-timeline");
  const events = timelineFor && timelineFor.id === selected ? timelineFor.events : [];
  list.replaceChildren(
    ...events.map((event) =>
      el(
        "li",
        { class: `frachub-event frachub-event-${event.type}`, dataset: { type: event.type } },
        el("time", { class: "text-body-secondary me-2 font-monospace", datetime: event.time }, new Date(event.time).toLocaleTimeString()),
        el("span", { class: "frachub-event-text" }, event.text || `${event.type} ${event.message}`),
      ),
    ),
  );
}

// A command as a shell would read it: a list's items separated and quoted where needed.
function commandText(command) {
  if (!Array.isArray(command)) return command;
  const quote = (part) => {
    if (/^[\w@%+=:,./-]+$/.test(part)) return part;
    if (!part.includes("'")) return `'${part}'`;
    if (!/["$`\\]/.test(part)) return `"${part}"`;
    return `'${part.replaceAll("'", "'\\''")}'`;
  };
  return command.map(quote).join(" ");
}

// A time limit as the service words it ("2 h", "1 d 4 h", "90 s"): quantities.time_limit_words.
function limitText(seconds) {
  const units = [[86400, "d"], [3600, "h"], [60, "min"], [1, "s"]];
  let rest = Math.round(seconds);
  const parts = [];
  for (const [size, unit] of units) {
    if (rest >= size) parts.push(`${Math.floor(rest / size)} ${unit}`);
    rest %= size;
  }
  return parts.join(" ") || "0 s";
}

function fact(term, value) {
  if (value === null || value === undefined || value === "") return [];
  return [el("dt", { class: "col-sm-3" }, term), el("dd", { class: "col-sm-9 mb-1" }, value)];
}

function renderDetail() {
  const workload = workloads.find((candidate) => candidate.id === selected);
  if (!workload) {
    detail.classList.add("d-none");
    showGpuUse(null);
    return;
  }
  detail.classList.remove("d-none");
  detail.dataset.id = workload.id;
  document.getElementById("frachub-detail-title").textContent = `#${workload.id} ${workload.name || ""}`;
  document.getElementById("frachub-detail-state").replaceChildren(stateBadge(workload.state));
  const pending = workload.state === State.PENDING;
  document.getElementById("frachub-detail-facts").replaceChildren(
    ...fact("Command", workload.command ? el("code", {}, commandText(workload.command)) : null),
    ...fact("Project", workload.project),
    ...fact("Resources", gpusText(workload)),
    ...fact("CPU, memory", resourcesText(workload) || null),
    ...fact("Queue position", pending && workload.queue_position ? `#${workload.queue_position}` : null),
    ...fact("Waiting", pending ? waitingFact(workload) : null),
    ...fact("Borrowed", workload.borrowed ? el("span", {}, borrowedBadge(workload), " ", workload.borrowed) : null),
    ...fact("Placement", placementText(workload)),
    ...fact("Time limit", workload.max_runtime_seconds ? limitText(workload.max_runtime_seconds) : null),
    ...fact("After", workload.after ? `job ${workload.after} ends` : workload.after_ok ? `job ${workload.after_ok} succeeds` : null),
    ...fact("Idle", workload.idle_warning),
    ...fact("Started", workload.started_at ? new Date(workload.started_at).toLocaleString() : null),
    ...fact("Finished", workload.finished_at ? new Date(workload.finished_at).toLocaleString() : null),
    ...fact("Exit code", workload.exit_code),
    ...fact("Preempted", workload.preemptions ? plural(workload.preemptions, "time") : null),
    ...fact("Restarts", workload.restart_count || null),
    ...fact("Message", workload.message),
  );
  showGpuUse(workload);
  renderTimeline();
  loadTimeline(workload.id);
  const notebook = isNotebook(workload);
  const label = document.getElementById("frachub-replica-label");
  label.classList.toggle("d-none", notebook || workload.replicas < 2);
  if (replicaSelect.options.length !== workload.replicas) {
    replicaSelect.replaceChildren(
      ...Array.from({ length: workload.replicas }, (_, replica) => el("option", { value: replica }, replica)),
    );
  }
  if (notebook) {
    stopFollowing();
    logBox.textContent = "";
    logStatus.textContent = "(a notebook has no job log)";
    return;
  }
  const replica = Number(replicaSelect.value || 0);
  if (!following || following.id !== workload.id || following.replica !== replica) {
    followLog(workload.id, replica);
  }
  if (following && !logBox.textContent) {
    logStatus.textContent = pending ? "(the log starts when the job does)" : "(following…)";
  }
}

replicaSelect.addEventListener("change", renderDetail);

function stopFollowing() {
  if (following) following.controller.abort();
  following = null;
}

async function followLog(id, replica) {
  stopFollowing();
  const controller = new AbortController();
  const mine = { id, replica, controller };
  following = mine;
  logBox.textContent = "";
  logStatus.textContent = "(following…)";
  logBox.classList.add("frachub-following");
  try {
    await stream(
      `workloads/${id}/logs?follow=1&tail=2000&replica=${replica}`,
      (text) => {
        if (!text) return;
        const atBottom = logBox.scrollTop + logBox.clientHeight >= logBox.scrollHeight - 20;
        logBox.append(text);
        if (logBox.textContent.length > LOG_LIMIT) {
          logBox.textContent = logBox.textContent.slice(-LOG_LIMIT);
        }
        if (atBottom) logBox.scrollTop = logBox.scrollHeight;
      },
      controller.signal,
    );
    if (following === mine) logStatus.textContent = "(the job has ended)";
  } catch (error) {
    if (error.name === "AbortError") return;
    if (following === mine) logStatus.textContent = `(${error.message})`;
  } finally {
    logBox.classList.remove("frachub-following");
  }
}

// -- projects ----------------------------------------------------------------------------

async function loadProjects() {
  const queues = await api("queues");
  const leaves = queues.filter((queue) => !queue.children.length).map((queue) => queue.name);
  const mine = userInfo.projects;
  const usable = isAdmin ? [...mine, ...leaves.filter((name) => !mine.includes(name))] : mine;
  if (projectSelect.options.length !== usable.length) {
    const chosen = projectSelect.value;
    projectSelect.replaceChildren(...usable.map((name) => el("option", { value: name }, name)));
    if (usable.includes(chosen)) projectSelect.value = chosen;
  }
  const noProject = !usable.length;
  document.getElementById("frachub-submit-button").disabled = noProject || !userInfo.submit;
  if (noProject) {
    submitStatus.textContent = isAdmin
      ? "There is no project yet: define one on the admin page or in the service's queues."
      : "You are in no project: ask an admin to add you to one.";
  }
  else if (!userInfo.submit) submitStatus.textContent = "Your login may not submit (custom:frachub:submit).";

  const yours = {};
  for (const workload of workloads) {
    if (![State.RUNNING, State.PREEMPTING].includes(workload.state)) continue;
    const held = (workload.placement || []).reduce(
      (sum, replica) => sum + replica.gpus.reduce((total, gpu) => total + gpu.share, 0),
      0,
    );
    yours[workload.project] = (yours[workload.project] || 0) + held;
  }
  const byName = new Map(queues.map((queue) => [queue.name, queue]));
  const body = document.querySelector("#frachub-projects-table tbody");
  if (!mine.length) {
    const words = isAdmin
      ? "You are in no project yourself; as an admin you may submit to any project from the form above."
      : "You are in no project.";
    body.replaceChildren(el("tr", {}, el("td", { colspan: 4, class: "text-body-secondary" }, words)));
    return;
  }
  body.replaceChildren(
    ...mine
      .map((name) => byName.get(name))
      .filter(Boolean)
      .map((queue) =>
        el(
          "tr",
          { class: "frachub-project", dataset: { project: queue.name } },
          el("th", { scope: "row" }, queue.name),
          el("td", { class: "frachub-deserved" }, number(queue.deserved_gpus)),
          el(
            "td",
            { class: "frachub-allocated" },
            number(queue.allocated_gpus),
            el("span", { class: "text-body-secondary small" }, ` (yours ${number(yours[queue.name] || 0)})`),
          ),
          el("td", { class: "frachub-fair-share" }, number(queue.fair_share_gpus)),
        ),
      ),
  );
}

// -- the submit form ---------------------------------------------------------------------

gpuSelect.addEventListener("change", () => {
  document.getElementById("frachub-memory-field").classList.toggle("d-none", gpuSelect.value !== "memory");
});

// "lr=0.1,0.01 bs=32,64" (spaces or semicolons between parameters) as the API's sweep; the
// service checks names, values and sizes and names the field it refuses.
function sweepOf(text, parallel) {
  const parameters = {};
  for (const item of text.split(/[\s;]+/).filter(Boolean)) {
    const [name, values = ""] = item.split(/=(.*)/s);
    parameters[name] = values.split(",");
  }
  return Object.keys(parameters).length ? { parameters, parallel } : null;
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const data = new FormData(form);
  const body = {
    command: String(data.get("command") || "").trim(),
    replicas: Number(data.get("replicas") || 1),
  };
  if (gpuSelect.value === "memory") body.gpu_memory_gib = Number(data.get("gpu_memory_gib"));
  else body.gpus = Number(gpuSelect.value);
  // left empty: the service's default for training (the admin's default_cpu/default_memory_gib)
  if (String(data.get("cpu") || "").trim()) body.cpu = Number(data.get("cpu"));
  if (String(data.get("memory_gib") || "").trim()) body.memory_gib = Number(data.get("memory_gib"));
  const name = String(data.get("name") || "").trim();
  if (name) body.name = name;
  if (data.get("project")) body.project = data.get("project");
  const timeLimit = String(data.get("time_limit") || "").trim();
  if (timeLimit) body.time_limit = timeLimit;  // the service reads Slurm's formats
  const after = String(data.get("after") || "").trim();
  if (after) body[data.get("after_ok") ? "after_ok" : "after"] = Number(after);
  const sweep = sweepOf(String(data.get("sweep") || ""), Number(data.get("parallel") || 1));
  if (sweep) body.sweep = sweep;
  if (!body.command) {
    submitStatus.className = "small text-danger";
    submitStatus.textContent = "command: say what to run";
    return;
  }
  const button = document.getElementById("frachub-submit-button");
  button.disabled = true;
  submitStatus.className = "small text-body-secondary";
  submitStatus.textContent = "Submitting…";
  try {
    const created = await api("workloads", { method: "POST", body });
    submitStatus.className = "small text-success";
    submitStatus.textContent = created.workloads
      ? `Submitted sweep #${created.id}: ${plural(created.workloads.length, "job")}, at most ${created.parallel} at once.`
      : `Submitted #${created.id} (${created.state}).`;
    clearError();
    selected = created.id;
    await refresh();
  } catch (error) {
    submitStatus.className = "small text-danger";
    submitStatus.textContent = error.message;
  } finally {
    button.disabled = false;
  }
});

// -- start -------------------------------------------------------------------------------

async function start() {
  try {
    userInfo = await api("user");
  } catch (error) {
    showError(error);
    table.replaceChildren();
    return;
  }
  selected = hashedWorkload(); // the first load shows it
  refresh = every(POLL_MS, async () => {
    await loadWorkloads();
    await loadProjects(); // after the workloads: "yours" is counted from them
  });
}

let refresh = () => {};
start();
