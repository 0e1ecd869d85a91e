// The task layer's sections of the Controller's web page (tasks/_page.py):
// what Flower shows of a Celery cluster. It runs after the page's own script,
// and draws from each snapshot's `app.tasks` (the window of the last runs, by
// state), `app.overview` (each node's workers, limits, running, waiting and
// delayed tasks, schedules) and `named` (the task counters, sampled); and
// the forms of its control actions (revoke, suspend) in the page's Control section.
"use strict";
(() => {
  const {$, text, row, clear, fmt, clock, chart, legend, pick, control, showTask, onRender} =
    window.actorctl;

  // The colours of the tasks' states.
  const style = document.createElement("style");
  style.textContent = ".SUCCESS { color: #060; } .FAILURE, .REVOKED { color: #b00; } .RETRY { color: #b60; }";
  document.head.appendChild(style);

  // The page's task actions (tasks/_page.py: POST /api/control/revoke and /suspend).
  $("app-control").innerHTML = `
<form id="revokeform"><input id="revokeid" placeholder="task id" size="40"> <button>revoke</button></form>
<form id="suspendform"><input id="suspendtask" placeholder="task name" size="40"> <button>suspend</button></form>
`;
  $("revokeform").onsubmit = (e) => {
    e.preventDefault(); control("revoke", {task_id: $("revokeid").value.trim()}); };
  $("suspendform").onsubmit = (e) => {
    e.preventDefault(); control("suspend", {task: $("suspendtask").value.trim()}); };

  const RUN_HEAD = "<th>finished</th><th>task id</th><th>name</th><th>arguments</th><th>state</th>" +
    "<th>result or error</th><th>run time</th><th>worker</th><th>retries</th>";
  const table = (id, head) => `<table id="${id}"><thead><tr>${head}</tr></thead><tbody></tbody></table>`;
  $("app").innerHTML = `
<h2>Tasks <span id="tasks-status" class="kind"></span></h2>
<form id="tasks-search"><input id="tasks-q" placeholder="task id or name" size="40">
 <button>search</button> <span id="tasks-found" class="kind"></span></form>
${table("tasks-results", RUN_HEAD)}
<h3>Per task, last minutes</h3>
<div class="chart"><div class="title">Runs per second (succeeded and failed), by task</div>
<svg id="tasks-rate" width="560" height="170"></svg></div>
<div class="chart"><div class="title">Failure rate (% of runs), by task</div>
<svg id="tasks-failures" width="560" height="170"></svg></div>
<div id="tasks-legend"></div>
${table("tasks-counts", "<th>task</th><th>succeeded</th><th>failed</th><th>retried</th>" +
  "<th>failure rate, last minute</th><th>failure rate, since start</th>")}
<h3>Pools: budget, active and reserved</h3>
${table("tasks-pools", "<th>node</th><th>worker</th><th>pool</th><th>budget</th><th>bounds</th>" +
  "<th>active</th><th>reserved</th><th>runs ended</th>")}
<h3>Running</h3>
${table("tasks-active", "<th>started</th><th>task id</th><th>name</th><th>arguments</th>" +
  "<th>running for</th><th>worker</th><th>node</th>")}
<h3>Reserved (taken, waiting for a run slot or a limit)</h3>
${table("tasks-reserved", "<th>received</th><th>task id</th><th>name</th><th>arguments</th>" +
  "<th>waiting for</th><th>worker</th><th>node</th>")}
<h3>Failed</h3>
${table("tasks-failed", RUN_HEAD)}
<h3>Retried</h3>
${table("tasks-retried", RUN_HEAD)}
<h3>Recent</h3>
${table("tasks-recent", RUN_HEAD)}
<h3>Rate limits and suspended tasks</h3>
${table("tasks-limits", "<th>node</th><th>where</th><th>task</th><th>rate limit</th>" +
  "<th>concurrency</th><th>suspended</th>")}
<h3>Delayed tasks (countdown, eta, retries)</h3>
${table("tasks-scheduled", "<th>eta</th><th>task id</th><th>name</th><th>arguments</th><th>node</th>")}
<h3>Periodic schedules</h3>
${table("tasks-schedules", "<th>name</th><th>task</th><th>schedule</th><th>last</th><th>next</th>" +
  "<th>fires here</th><th>node</th>")}
`;

  const seconds = (s) => s === null || s === undefined ? "-"
    : s < 1 ? fmt(s * 1000, "ms") : s < 120 ? fmt(s, "s") : fmt(s / 60, "min");
  const args = (r) => {
    const kw = r.kwargs && r.kwargs !== "{}" ? ", " + r.kwargs : "";
    return (typeof r.args === "string" ? r.args : JSON.stringify(r.args)) + kw;
  };
  // The task id as a link: its trace (the page's Task section) on a click.
  function idLink(id) {
    const a = text("a", id, "id");
    a.title = "show this task's trace";
    a.onclick = () => {
      location.hash = "task=" + encodeURIComponent(id);
      showTask(id);
      $("trace").scrollIntoView();
    };
    return a;
  }
  function runRows(id, rows) {
    const body = clear(id);
    for (const r of rows || []) {
      const outcome = r.state === "SUCCESS" ? text("span", r.result) : text("span", r.error, "err");
      row(body, [clock(r.finished), idLink(r.id), r.name, args(r), text("span", r.state, r.state),
                 outcome, seconds(r.runtime), `${r.worker} @ ${r.node}`, r.retries]);
    }
    if (!(rows || []).length) row(body, ["", "none in the window"]);
  }

  function renderCounts(named, now) {
    const rates = {}, failures = {};
    const body = clear("tasks-counts");
    for (const [name, n] of Object.entries(named).sort()) {
      const pts = n.points;
      rates[name] = pts.map((p) => ({at: p.at, v: (p.succeeded || 0) + (p.failed || 0)}));
      failures[name] = pts.map((p) => {
        const runs = (p.succeeded || 0) + (p.failed || 0);
        return {at: p.at, v: runs > 0 ? (p.failed || 0) / runs : null};
      });
      let ok = 0, bad = 0;  // runs over the last minute: rate times interval
      for (const p of pts) {
        if (p.at < now - 60) continue;
        ok += (p.succeeded || 0) * p.dt; bad += (p.failed || 0) * p.dt;
      }
      const t = n.totals, all = (t.succeeded || 0) + (t.failed || 0);
      const num = (v) => text("span", v, "num");
      row(body, [name, num(fmt(t.succeeded || 0)), num(fmt(t.failed || 0)), num(fmt(t.retried || 0)),
                 ok + bad > 0 ? fmt(100 * bad / (ok + bad), "%") : "no runs",
                 all > 0 ? fmt(100 * (t.failed || 0) / all, "%") : "no runs"]);
    }
    legend($("tasks-legend"), chart($("tasks-rate"), rates, "/s"));
    chart($("tasks-failures"), failures, "%", 100);
  }

  function renderOverview(overview, now) {
    const pools = clear("tasks-pools"), active = clear("tasks-active"), reserved = clear("tasks-reserved");
    const limits = clear("tasks-limits"), delayed = clear("tasks-scheduled"), periodic = clear("tasks-schedules");
    const limitRow = (node, where, task, l) => {
      if (l.rate_limit || l.suspended || l.concurrency)
        row(limits, [node, where, task, l.rate_limit || "-", l.concurrency || "-",
                     text("span", l.suspended ? "suspended" : "no", l.suspended ? "err" : "")]);
    };
    for (const [node, o] of Object.entries(overview || {}).sort()) {
      if (!o || o.unanswered) { row(pools, [node, text("span", "no answer: " + (o && o.unanswered), "err")]); continue; }
      for (const [worker, w] of Object.entries(o.workers || {}))
        row(pools, [node, worker, w.pool, w.budget, (w.bounds || []).join("–"), w.active, w.reserved,
                    Object.values(o.total || {}).reduce((a, b) => a + b, 0)]);
      for (const r of o.active || [])
        row(active, [clock(r.started), idLink(r.id), r.name, args(r), seconds(now - r.started), r.worker, node]);
      for (const r of o.reserved || [])
        row(reserved, [clock(r.received), idLink(r.id), r.name, args(r), seconds(now - r.received), r.worker, node]);
      for (const [worker, tasks] of Object.entries(o.limits || {}))
        for (const [task, l] of Object.entries(tasks)) limitRow(node, "worker " + worker, task, l);
      for (const [pool, r] of Object.entries(o.routers || {}))
        for (const [task, l] of Object.entries(r.tasks || {})) limitRow(node, "router " + pool + " (global)", task, l);
      for (const r of o.scheduled || []) row(delayed, [clock(r.eta), idLink(r.id), r.name, args(r), node]);
      for (const r of o.schedules || [])
        row(periodic, [r.name, r.task, `${r.kind} ${r.schedule}`, r.last_text || "-", r.next_text || "-",
                       r.holding ? "yes" : "no", node]);
      const counts = o.counts || {};
      for (const [key, into] of [["active", active], ["reserved", reserved], ["scheduled", delayed]])
        if ((counts[key] || 0) > (o[key] || []).length)
          row(into, ["", `${node}: ${counts[key] - o[key].length} more not shown`]);
    }
    for (const [id, what] of [["tasks-active", "no task running"], ["tasks-reserved", "none waiting"],
                              ["tasks-limits", "no rate limit, cap or suspended task"],
                              ["tasks-scheduled", "no delayed task"], ["tasks-schedules", "no periodic task"]])
      if (!$(id).querySelector("tbody").children.length) row($(id).querySelector("tbody"), ["", what]);
  }

  onRender((s) => {
    const app = s.app || {}, tasks = app.tasks || {};
    const missing = Object.entries(tasks.unanswered || {}).map(([n, why]) => `${n}: ${why}`);
    $("tasks-status").textContent = tasks.error ? "the nodes did not answer: " + tasks.error
      : `(the last ${fmt(tasks.kept || 0)} runs kept, of ${fmt(tasks.window || 0)})` +
        (missing.length ? "; no answer from " + missing.join("; ") : "");
    const by = tasks.by || {};
    runRows("tasks-recent", tasks.newest);
    runRows("tasks-failed", by.FAILURE);
    runRows("tasks-retried", by.RETRY);
    renderCounts(s.named || {}, s.now);
    renderOverview(app.overview, s.now);
  });

  async function search(q) {
    const found = $("tasks-found");
    try {
      const r = await fetch("/api/feed/tasks?limit=100&q=" + encodeURIComponent(q));
      const answer = await r.json();
      if (!r.ok) { found.textContent = `search failed (${r.status}): ${answer.error}`; return; }
      runRows("tasks-results", answer.rows);
      found.textContent = `${answer.rows.length} found (newest first)`;
    } catch (e) { found.textContent = "search failed: " + e; }
  }
  $("tasks-search").onsubmit = (e) => { e.preventDefault(); search($("tasks-q").value.trim()); };
})();
