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
});
