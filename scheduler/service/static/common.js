// What the panel and the admin page share: calling the REST API with the login cookie and
// the XSRF token, following a log, building DOM nodes (always as text: names, commands and
// logs come from users), and showing states, shares and times the same way everywhere.

const root = document.getElementById("frachub");
export const apiUrl = root.dataset.apiUrl;
export const me = root.dataset.user;
export const isAdmin = root.dataset.admin === "true";
// The workload states and their groups, as the service names them (the page carries them,
// from scheduler/engine/lifecycle.py): State.PENDING is "pending".
const states = JSON.parse(root.dataset.states);
export const State = Object.freeze(states.names);
export const ACTIVE = new Set(states.active);
export const CANCELLABLE = new Set(states.cancellable);

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// The browser sends the HubOAuth cookie by itself; the service accepts it only with the
// XSRF token this page was rendered with (window.jhdata comes from the hub's page.html).
function headers(extra = {}) {
  return { "X-XSRFToken": window.jhdata.xsrf_token, ...extra };
}

export async function api(path, { method = "GET", body, accept } = {}) {
  const init = { method, credentials: "same-origin", headers: headers(accept ? { Accept: accept } : {}) };
  if (body !== undefined) {
    init.headers = headers({ "Content-Type": "application/json" });
    init.body = JSON.stringify(body);
  }
  return (await call(apiUrl + path, init)).data;
}

// One request: its JSON (or text) and the response; a refusal throws the API's message.
async function call(url, init) {
  const response = await fetch(url, init);
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = text;
  }
  if (!response.ok) {
    const message = (data && data.message) || `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, message);
  }
  return { data, response };
}

// The hub's pagination envelope: {items, _pagination: {total, next}}.
export const PAGINATION = "application/jupyterhub-pagination+json";

// Every item of a list (`path` has a query), up to about `most`: bare pages, each naming
// the next in its `Link: <…>; rel="next"` header (one request answers at most the service's
// page_max_limit, 500 by default). Bare lists count nothing, unlike the envelope.
export async function listAll(path, most = 10000) {
  const items = [];
  let url = apiUrl + path;
  while (url && items.length < most) {
    const { data, response } = await call(url, { credentials: "same-origin", headers: headers() });
    items.push(...data);
    const next = /<([^>]+)>;\s*rel="next"/.exec(response.headers.get("Link") || "");
    url = next ? next[1] : null;
  }
  return items;
}

// Stream a plain-text answer (logs with follow=1) into onText until the server ends it.
export async function stream(path, onText, signal) {
  const response = await fetch(apiUrl + path, {
    credentials: "same-origin",
    headers: headers(),
    signal,
  });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      message = (await response.json()).message || message;
    } catch {
      // not JSON: keep the status line
    }
    throw new ApiError(response.status, message);
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    onText(decoder.decode(value, { stream: true }));
  }
  onText(decoder.decode());
}

// el("td", {class: "x", title: "y", dataset: {id: 3}, onclick: f}, "text", otherNode)
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "style") Object.assign(node.style, value);
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const errorBox = document.getElementById("frachub-error");

export function showError(error) {
  errorBox.textContent = error instanceof Error ? error.message : String(error);
  errorBox.classList.remove("d-none");
}

export function clearError() {
  errorBox.classList.add("d-none");
  errorBox.textContent = "";
}

const STATE_STYLES = {
  [State.PENDING]: "text-bg-warning",
  [State.RUNNING]: "text-bg-success",
  [State.PREEMPTING]: "text-bg-warning",
  [State.CANCELLING]: "text-bg-secondary",
  [State.STOPPING]: "text-bg-secondary",
  [State.SUCCEEDED]: "text-bg-primary",
  [State.FAILED]: "text-bg-danger",
  [State.CANCELLED]: "text-bg-secondary",
  [State.RELEASED]: "text-bg-secondary",
  [State.REVOKED]: "text-bg-danger",
};

export function stateBadge(state) {
  return el("span", { class: `badge frachub-state ${STATE_STYLES[state] || "text-bg-light"}` }, state);
}

export function number(value) {
  if (value === null || value === undefined) return "—";
  return String(Math.round(value * 1000) / 1000);
}

// A count with its noun agreeing, by the rule of scheduler/common/quantities.py's plural (the API's
// words come from there): "1 time", "0.5 GPU", "0 GPUs", "4 GPUs".
export function plural(count, noun, nouns = `${noun}s`) {
  const value = Math.round(Number(count) * 1000) / 1000;
  return `${value} ${value > 0 && value <= 1 ? noun : nouns}`;
}

export function gpusText(workload) {
  const each =
    workload.gpus !== null && workload.gpus !== undefined
      ? plural(workload.gpus, "GPU")
      : `${number(workload.gpu_memory_gib)} GiB`;
  return workload.replicas > 1 ? `${each} × ${workload.replicas}` : each;
}

// The CPU and memory (RAM) each replica asked for, "" when it asked for neither: "2 CPUs, 16 GiB
// memory", in the words of scheduler/common/quantities.py's cores and memory_words.
export function resourcesText(workload) {
  const parts = [];
  if (workload.cpu) parts.push(plural(workload.cpu, "CPU"));
  const gib = workload.memory_gib;
  if (gib) parts.push(gib >= 1 ? `${number(gib)} GiB memory` : `${Math.round(gib * 1024)} MiB memory`);
  return parts.join(", ");
}

export function placementText(workload) {
  return (workload.placement || [])
    .map((replica) => {
      // a share of a GPU says how much of it; a whole GPU needs no "(1)"
      const gpus = replica.gpus.map((gpu) => `GPU ${gpu.index}${gpu.share < 1 ? ` (${number(gpu.share)})` : ""}`);
      return `${replica.node}: ${gpus.join(", ")}`;
    })
    .join("; ");
}

// What the "Placement / waiting for" column says for a workload in any state.
export function whereCell(workload) {
  if (workload.state === State.PENDING) {
    return el(
      "td",
      { class: "frachub-pending" },
      workload.queue_position
        ? el("span", { class: "frachub-queue-position fw-semibold" }, `#${workload.queue_position} in queue`)
        : null,
      workload.queue_position ? " · " : null,
      // the plain headline first; the engine's full reason on hover and in the details
      el(
        "span",
        { class: "frachub-pending-reason", title: workload.pending_reason || "" },
        workload.pending_headline || workload.pending_reason || "waiting",
      ),
    );
  }
  if (ACTIVE.has(workload.state)) {
    return el("td", { class: "frachub-placement font-monospace small" }, placementText(workload));
  }
  const parts = [];
  if (workload.exit_code !== null && workload.exit_code !== undefined) parts.push(`exit ${workload.exit_code}`);
  if (workload.message) parts.push(workload.message);
  return el("td", { class: "small text-body-secondary" }, parts.join(" · "));
}

export function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.round(seconds)} s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.round(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

export function timeCell(iso) {
  return el("td", { class: "small text-nowrap", title: iso ? new Date(iso).toLocaleString() : null }, ago(iso));
}

// A cancel button that asks once more before it acts, so one stray click cannot end a
// three-day run.
export function cancelButton(workload, onCancelled) {
  let armed = null;
  const button = el("button", { type: "button", class: "btn btn-sm btn-outline-danger frachub-cancel" }, "Cancel");
  button.addEventListener("click", async (event) => {
    event.stopPropagation();
    if (!armed) {
      button.textContent = "Confirm cancel";
      button.classList.replace("btn-outline-danger", "btn-danger");
      armed = setTimeout(() => {
        armed = null;
        button.textContent = "Cancel";
        button.classList.replace("btn-danger", "btn-outline-danger");
      }, 5000);
      return;
    }
    clearTimeout(armed);
    button.disabled = true;
    button.textContent = "Cancelling…";
    try {
      await api(`workloads/${workload.id}`, { method: "DELETE" });
      clearError();
    } catch (error) {
      showError(error);
    }
    onCancelled();
  });
  return button;
}

// Run refresh now and then every `ms`; a failure is shown and the next round tries again.
export function every(ms, refresh) {
  const updated = document.getElementById("frachub-updated");
  let timer = null;
  async function round() {
    clearTimeout(timer);
    try {
      await refresh();
      if (updated) updated.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (error) {
      showError(error);
    }
    timer = setTimeout(round, document.hidden ? ms * 5 : ms);
  }
  round();
  return round; // call it to refresh at once (after a submit or a cancel)
}
