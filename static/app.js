// jobfleet console: progressive enhancement only; every page works without it.
"use strict";

// Confirm destructive forms (no inline handlers: the CSP forbids them).
document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) event.preventDefault();
});

// Show only the fields that the chosen schedule and handler types use.
function applyWhen(form) {
  form.querySelectorAll("[data-when]").forEach((el) => {
    const [name, value] = el.getAttribute("data-when").split("=");
    const control = form.querySelector(`[name="${name}"]`);
    el.hidden = control ? control.value !== value : false;
  });
}

// The cron helper: next fire times (or the error) as you type.
function setupCronPreview(form) {
  const expr = form.querySelector('[name="schedule.expr"]');
  const tz = form.querySelector('[name="schedule.timezone"]');
  const list = document.getElementById("cron-next");
  const error = document.getElementById("cron-error");
  if (!expr || !list || !error) return;
  let timer = null;
  let seq = 0;
  const refresh = () => {
    const mine = ++seq;
    const params = new URLSearchParams({ expr: expr.value, timezone: tz ? tz.value : "" });
    fetch(`/console/cron-preview?${params}`, { credentials: "same-origin" })
      .then((r) => r.json())
      .then((body) => {
        if (mine !== seq) return;
        list.replaceChildren();
        (body.next || []).forEach((t) => {
          const li = document.createElement("li");
          li.textContent = t;
          list.appendChild(li);
        });
        error.textContent = body.error || "";
      })
      .catch(() => {});
  };
  const schedule = () => { clearTimeout(timer); timer = setTimeout(refresh, 250); };
  expr.addEventListener("input", schedule);
  if (tz) tz.addEventListener("input", schedule);
}

// Tail a run's log while it runs; stop when the run is final and the last line is in.
function setupLogTail(pre) {
  const runId = pre.getAttribute("data-run");
  const state = document.getElementById("log-state");
  const status = document.getElementById("run-status");
  let next = 1;
  let failures = 0;
  const poll = () => {
    fetch(`/console/runs/${runId}/log?from_line=${next}`, { credentials: "same-origin" })
      .then((r) => r.json())
      .then((body) => {
        failures = 0;
        if (body.content) pre.append(document.createTextNode(body.content));
        if (typeof body.to_line === "number" && body.to_line >= next) next = body.to_line + 1;
        if (status && body.status) {
          status.textContent = body.status_label || body.status;
          status.setAttribute("data-status", body.status);
          status.className = `badge status-${body.status}`;
        }
        if (body.error) state.textContent = body.error;
        else state.textContent = body.done ? "" : "…";
        if (!body.done) setTimeout(poll, 1000);
        // A page drawn while the run was in flight reloads once to show the final results.
        else if (body.reload && pre.getAttribute("data-final") !== "true") window.location.reload();
      })
      .catch(() => { if (++failures < 30) setTimeout(poll, 2000); });
  };
  poll();
}

// The workflow editor: what saving would answer, and the graph, as you type (nothing is saved).
function setupWorkflowCheck(form) {
  const text = form.querySelector('[name="definition"]');
  const state = document.getElementById("definition-state");
  const preview = document.getElementById("dag-preview");
  if (!text || !state || !preview) return;
  let timer = null;
  let seq = 0;
  const refresh = () => {
    const mine = ++seq;
    fetch("/console/workflows/check", {
      method: "POST",
      credentials: "same-origin",
      body: new URLSearchParams(new FormData(form)),
    })
      .then((r) => r.json())
      .then((body) => {
        if (mine !== seq) return;
        form.querySelectorAll("[data-live-error]").forEach((el) => el.remove());
        const errors = body.errors || {};
        const fields = Object.keys(errors);
        state.textContent = fields.length === 0 ? state.getAttribute("data-ok") : "";
        state.className = fields.length === 0 ? "ok" : "muted";
        fields.forEach((field) => {
          const control = form.querySelector(`[name="${field}"]`) || text;
          const span = document.createElement("span");
          span.className = "field-error";
          span.setAttribute("data-live-error", field);
          span.textContent = control === text && field !== "definition" ? `${field}: ${errors[field]}` : errors[field];
          control.insertAdjacentElement("afterend", span);
        });
        if (body.graph) preview.innerHTML = body.graph;
      })
      .catch(() => {});
  };
  const schedule = () => { clearTimeout(timer); timer = setTimeout(refresh, 300); };
  form.addEventListener("input", schedule);
  form.addEventListener("change", schedule);
}

// A workflow run's graph colours in as its nodes run; a click on a node opens its newest run.
function setupWorkflowRun(box) {
  const runId = box.getAttribute("data-run");
  const badge = document.getElementById("wfrun-status");
  let failures = 0;
  const poll = () => {
    fetch(`/console/workflow-runs/${runId}/state`, { credentials: "same-origin" })
      .then((r) => r.json())
      .then((body) => {
        failures = 0;
        (body.nodes || []).forEach((n) => {
          const node = box.querySelector(`.dag-node[data-key="${CSS.escape(n.key)}"]`);
          if (node) {
            node.setAttribute("class", `dag-node status-${n.status}`);
            node.setAttribute("data-status", n.status);
            if (n.href) node.setAttribute("href", n.href);
          }
          const cell = document.querySelector(`[data-node-status="${CSS.escape(n.key)}"]`);
          if (cell) {
            cell.className = `badge status-${n.status}`;
            cell.textContent = n.label;
          }
        });
        if (badge && body.status) {
          badge.textContent = body.status_label || body.status;
          badge.setAttribute("data-status", body.status);
          badge.className = `badge status-${body.status}`;
        }
        if (!body.done) setTimeout(poll, 1000);
        // A page drawn while the run was in flight reloads once for the final table and buttons.
        else if (box.getAttribute("data-final") !== "true") window.location.reload();
      })
      .catch(() => { if (++failures < 30) setTimeout(poll, 2000); });
  };
  if (box.getAttribute("data-final") !== "true") poll();
}

document.addEventListener("DOMContentLoaded", () => {
  ["job-form", "channel-form"].forEach((id) => {
    const form = document.getElementById(id);
    if (!form) return;
    applyWhen(form);
    form.addEventListener("change", () => applyWhen(form));
    setupCronPreview(form);
  });
  const log = document.getElementById("run-log");
  if (log) setupLogTail(log);
  const workflowForm = document.getElementById("workflow-form");
  if (workflowForm) setupWorkflowCheck(workflowForm);
  const workflowRun = document.getElementById("wfrun-graph");
  if (workflowRun) setupWorkflowRun(workflowRun);
});

// The job list's bulk form: deleting asks first; a box ticks every job on the page.
document.addEventListener("submit", (event) => {
  const form = event.target;
  const question = form.getAttribute("data-confirm-delete");
  const action = form.querySelector('[name="action"]');
  if (question && action && action.value === "delete" && !window.confirm(question)) {
    event.preventDefault();
  }
});
(() => {
  const all = document.getElementById("bulk-all");
  if (!all) return;
  all.addEventListener("change", () => {
    document.querySelectorAll(".bulk-pick").forEach((box) => {
      box.checked = all.checked;
    });
  });
})();
