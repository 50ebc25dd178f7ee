// Forage dashboard: plain JavaScript, no build step, no network beyond this gateway.
"use strict";

const $ = (id) => document.getElementById(id);
// counters: the server's (run.json, deduplicated by document) and what this page's events showed since (keys
// deduplicated too); each counter shows the larger, so a replayed run counts each document once
// sources: run.json's numbered sources of the open run's report (their standing: retracted, cited by, open access)
const state = { runId: null, ws: null, lastSeq: 0, ended: false, evidence: null, sources: null, reqs: {}, counts: null,
                seen: null, models: null };

// -- the address: #token=... (the URL `forage serve` prints, kept for this tab) and #run=ID (one run's page) --------
const hashParams = () => new URLSearchParams(location.hash.slice(1));
(function takeToken() {
  const params = hashParams();
  if (params.has("token")) {
    sessionStorage.setItem("forage-token", params.get("token"));
    params.delete("token");  // out of the address bar (and of bookmarks and shared links); #run= stays
    history.replaceState(null, "", location.pathname + location.search + (params.toString() ? "#" + params : ""));
  }
})();
const runHash = (runId) => "#run=" + encodeURIComponent(runId);
const token = () => sessionStorage.getItem("forage-token");
if (token()) $("api-docs-link").href = "/docs?token=" + encodeURIComponent(token());  // the page needs it too

async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (token()) headers["Authorization"] = "Bearer " + token();
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, Object.assign({}, options, { headers }));
  if (!resp.ok) {
    let detail = resp.statusText;
    try { const j = await resp.json(); detail = typeof j.detail === "string" ? j.detail : JSON.stringify(j.detail); } catch (e) { /* not JSON */ }
    throw new Error(`${resp.status}: ${detail}`);
  }
  const type = resp.headers.get("content-type") || "";
  return type.includes("json") ? resp.json() : resp.text();
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v; else if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
}

// -- runs list ---------------------------------------------------------------------------------------------
async function loadRuns() {
  try {
    const runs = await api("/api/runs");
    const ul = $("runs"); ul.replaceChildren();
    for (const r of runs) {
      // a link to the run's address: opens it here, or in a new tab (its URL can be kept and shared)
      const li = el("li", { "data-run": r.run_id },
        el("span", { class: "badge " + r.status, text: r.status }), " ",
        el("a", { class: "run-link", href: runHash(r.run_id), text: (r.query || "").slice(0, 70) || r.run_id }), el("br"),
        el("span", { class: "muted mono", text: r.run_id + (r.final_coverage != null ? ` · ${r.final_coverage.toFixed(2)}` : "") }));
      if (r.run_id === state.runId) li.classList.add("open");
      li.addEventListener("click", (e) => {
        if (e.button !== 0 || e.ctrlKey || e.metaKey || e.shiftKey || e.altKey) return;  // the link's own new tab
        e.preventDefault();
        openRun(r.run_id);  // again when it is open already: a fresh look
      });
      ul.append(li);
    }
  } catch (e) { $("start-error").textContent = String(e.message || e); }
}

// -- start ---------------------------------------------------------------------------------------------------
$("start").addEventListener("click", async () => {
  $("start-error").textContent = "";
  const body = { query: $("query").value };
  if ($("library").value.trim()) body.library = $("library").value.trim();
  if ($("preset").value) body.preset = $("preset").value;
  if ($("max-iterations").value) body.max_iterations = Number($("max-iterations").value);
  if ($("max-requirements").value) body.max_requirements = Number($("max-requirements").value);
  if ($("offline").checked) body.offline = true;
  if ($("backend").value) body.llm_backend = $("backend").value;
  if ($("model").value.trim()) body.model = $("model").value.trim();
  $("start").disabled = true;
  try {
    const created = await api("/api/runs", { method: "POST", body: JSON.stringify(body) });
    await openRun(created.run_id);
    loadRuns();
  } catch (e) { $("start-error").textContent = String(e.message || e); }
  finally { $("start").disabled = false; }
});

// -- one run -------------------------------------------------------------------------------------------------
function resetView() {
  if (state.ws) { state.ws.onclose = null; state.ws.close(); }
  Object.assign(state, { ws: null, lastSeq: 0, ended: false, evidence: null, sources: null, reqs: {},
                         counts: { found: 0, downloaded: 0, ingested: 0, failed: 0 },
                         seen: { found: 0, downloaded: 0, ingested: new Set(), failed: new Set() } });
  $("timeline").replaceChildren(); $("coverage").replaceChildren(); $("events").replaceChildren();
  $("failures").replaceChildren(); $("report").replaceChildren(); $("asks").replaceChildren();
  $("ask-box").hidden = true; $("ask-error").textContent = "";
  for (const id of ["n-found", "n-downloaded", "n-ingested", "n-failed", "n-egress", "n-events"]) $(id).textContent = "0";
  $("approval").hidden = true; $("report-box").hidden = true; $("run-error").textContent = "";
}

async function openRun(runId) {
  resetView();
  state.runId = runId;
  // the page's address names the run: kept on reload, a bookmark or a link opens it (Back returns to the last one)
  if (hashParams().get("run") !== runId) history.pushState(null, "", location.pathname + location.search + runHash(runId));
  for (const li of document.querySelectorAll("#runs li")) li.classList.toggle("open", li.dataset.run === runId);
  $("run-head").hidden = false; $("live").hidden = false;
  $("run-id").textContent = runId;
  $("run-title").textContent = runId;
  try { await refreshState(); }
  catch (e) {  // an unknown run (a stale link) or a wrong token: say so, nothing to listen to
    if (runId === state.runId) { $("run-error").textContent = String(e.message || e); $("live").hidden = true; }
    return;
  }
  if (runId === state.runId) connect();
}

// a run's address typed, pasted, followed from a link, or reached with Back/Forward
function openFromAddress() {
  const runId = hashParams().get("run");
  if (runId && runId !== state.runId) openRun(runId);
}
window.addEventListener("hashchange", openFromAddress);
window.addEventListener("popstate", openFromAddress);

async function refreshState(proposed = false) {
  const runId = state.runId;
  // proposed: the requirements event came, but the gateway may not have taken the plan yet; its long poll
  // answers once planning is over (a run this gateway does not hold has no proposal to wait for: 404)
  const s = proposed ? await api(`/api/runs/${runId}/proposal?wait=60`).catch(() => api(`/api/runs/${runId}`))
                     : await api(`/api/runs/${runId}`);
  if (runId !== state.runId) return s;
  $("run-title").textContent = s.query || runId;
  const badge = $("run-status"); badge.textContent = s.status; badge.className = "badge " + s.status;
  $("run-error").textContent = s.error || "";
  $("cancel").hidden = !["planning", "awaiting_approval", "running"].includes(s.status);
  $("resume").hidden = !s.resumable;  // interrupted (its gateway or driver stopped), cancelled or failed
  $("n-egress").textContent = s.egress_requests;
  for (const r of (s.requirements || [])) coverageRow(r.id, r.added_after ? `${r.text} (added after iteration ${r.added_after})` : r.text);
  for (const [rid, c] of Object.entries(s.coverage || {})) setCoverage(rid, c);
  if (s.proposal && s.status === "awaiting_approval") showProposal(s.proposal); else $("approval").hidden = true;
  if (s.documents) {
    for (const k of ["found", "downloaded", "ingested", "failed"]) state.counts[k] = s.documents[k];
    for (const [key, reason] of Object.entries(s.documents.failures || {})) addFailure(key, reason);
    showCounts();
  }
  if (s.report_ready && s.status === "finished") showReport();
  return s;
}

// -- approval ------------------------------------------------------------------------------------------------
function reqRow(id, text) {
  const li = el("li", {}, el("input", { class: "req-id", value: id, size: 3, style: "width:4em;flex:none" }),
                el("input", { class: "req-text", value: text }));
  const del = el("button", { class: "small", text: "×" }); del.addEventListener("click", () => li.remove());
  li.append(del); return li;
}
function searchRow(q, filters) {
  const li = el("li", {}, el("input", { class: "search-text", value: q.text || "" }),
                el("input", { class: "req-ids", value: (q.requirement_ids || []).join(","), placeholder: "R1,R2" }));
  // what is sent with the string besides its words (years, open access, authors, venue, ...)
  if (filters && filters.length) li.append(el("span", { class: "search-filters muted", text: filters.join(", ") }));
  li.dataset.extra = JSON.stringify(Object.fromEntries(Object.entries(q).filter(([k]) => !["text", "requirement_ids"].includes(k))));
  const del = el("button", { class: "small", text: "×" }); del.addEventListener("click", () => { li.remove(); noSearch(); });
  li.append(del); return li;
}
function noSearch() { $("no-search").hidden = $("search-edit").children.length > 0; }

function showProposal(p) {
  if (!$("approval").hidden) return;  // keep the researcher's edits
  $("req-edit").replaceChildren(...p.requirements.map((r) => reqRow(r.id, r.text)));
  $("search-edit").replaceChildren(...p.search_queries.map((q, i) => searchRow(q, (p.search_filters || [])[i])));
  $("degraded").textContent = p.degraded.length ? "note: " + p.degraded.join("; ") : "";
  noSearch();
  $("approval").hidden = false;
}
$("add-req").addEventListener("click", () => {
  const n = $("req-edit").children.length + 1; $("req-edit").append(reqRow("R" + n, ""));
});
$("add-search").addEventListener("click", () => { $("search-edit").append(searchRow({ text: "" })); noSearch(); });

$("approve").addEventListener("click", async () => {
  $("approve-error").textContent = "";
  const requirements = [...$("req-edit").children].map((li) => ({
    id: li.querySelector(".req-id").value.trim(), text: li.querySelector(".req-text").value.trim() }));
  const search_queries = [...$("search-edit").children].map((li) => Object.assign(JSON.parse(li.dataset.extra || "{}"), {
    text: li.querySelector(".search-text").value.trim(),
    requirement_ids: li.querySelector(".req-ids").value.split(",").map((s) => s.trim()).filter(Boolean) }));
  try {
    await api(`/api/runs/${state.runId}/approve`, { method: "POST", body: JSON.stringify({ requirements, search_queries }) });
    $("approval").hidden = true;
    for (const r of requirements) coverageRow(r.id, r.text);
    refreshState();
  } catch (e) { $("approve-error").textContent = String(e.message || e); }
});

$("cancel").addEventListener("click", async () => {
  try { await api(`/api/runs/${state.runId}/cancel`, { method: "POST" }); refreshState(); }
  catch (e) { $("run-error").textContent = String(e.message || e); }
});

$("resume").addEventListener("click", async () => {
  const runId = state.runId;
  $("resume").disabled = true;
  try {
    await api(`/api/runs/${runId}/resume`, { method: "POST" });
    if (runId !== state.runId) return;
    // the run's events go on after the ones already shown: listen again from there
    if (state.ws) { state.ws.onclose = null; state.ws.close(); }
    state.ended = false;
    connect();
    refreshState(); loadRuns();
  } catch (e) { $("run-error").textContent = String(e.message || e); }
  finally { $("resume").disabled = false; }
});

// -- live events ---------------------------------------------------------------------------------------------
function connect() {
  const runId = state.runId;
  const proto = location.protocol === "https:" ? "wss:" : "ws:";
  let url = `${proto}//${location.host}/ws/runs/${runId}?after=${state.lastSeq}`;
  if (token()) url += "&token=" + encodeURIComponent(token());
  const ws = new WebSocket(url);
  state.ws = ws;
  $("conn").textContent = "connecting";
  ws.onopen = () => { $("conn").textContent = "live"; };
  ws.onmessage = (msg) => {
    if (runId !== state.runId) return;
    const frame = JSON.parse(msg.data);
    if (frame.type === "event") onEvent(frame.event);
    else if (frame.type === "end") { state.ended = true; $("conn").textContent = "run over"; refreshState(); loadRuns(); }
    else if (frame.type === "error") $("run-error").textContent = frame.error;
  };
  ws.onclose = () => {
    if (runId !== state.runId || state.ended) return;
    $("conn").textContent = "reconnecting";
    setTimeout(() => { if (runId === state.runId && !state.ended) connect(); }, 1000);  // resumes after lastSeq
  };
}

function lane(name) {
  let row = document.querySelector(`#timeline .lane[data-lane="${CSS.escape(name)}"]`);
  if (!row) {
    $("timeline").append(el("div", { class: "lane-name", text: name }));
    row = el("div", { class: "lane", "data-lane": name });
    $("timeline").append(row);
  }
  return row;
}
function step(laneName, label, cls = "") {
  const row = lane(laneName);
  row.append(el("span", { class: "step " + cls, text: label }));
  while (row.children.length > 40) row.firstChild.remove();
}

function coverageRow(rid, text) {
  let row = document.querySelector(`#coverage .covrow[data-req="${CSS.escape(rid)}"]`);
  if (!row) {
    row = el("div", { class: "covrow", "data-req": rid }, el("b", { text: rid }),
             el("div", { class: "bar" }, el("div", { style: "width:0%" })), el("span", { class: "covval", text: "—" }),
             el("div", { class: "covtext", text: text || "" }));
    $("coverage").append(row);
  } else if (text) row.querySelector(".covtext").textContent = text;
  return row;
}
function setCoverage(rid, value, failed = false) {
  const row = coverageRow(rid);
  row.querySelector(".bar > div").style.width = `${Math.round(100 * value)}%`;
  row.querySelector(".covval").textContent = failed ? "failed" : value.toFixed(2);
  row.dataset.coverage = String(value);
}
function showCounts() {
  const seen = { found: state.seen.found, downloaded: state.seen.downloaded,
                 ingested: state.seen.ingested.size, failed: state.seen.failed.size };
  for (const k of ["found", "downloaded", "ingested", "failed"]) $("n-" + k).textContent = Math.max(state.counts[k], seen[k]);
}
function addFailure(key, reason) {
  if (document.querySelector(`#failures li[data-key="${CSS.escape(key)}"]`)) return;
  $("failures").append(el("li", { "data-key": key, text: `${key}: ${reason}` }));
}

function onEvent(ev) {
  if (ev.seq <= state.lastSeq) return;  // already shown
  state.lastSeq = ev.seq;
  $("n-events").textContent = ev.seq;
  $("events").append(el("li", { value: ev.seq, text: `${ev.stage} ${ev.kind}${ev.requirement_id ? " [" + ev.requirement_id + "]" : ""}: ${ev.message}` }));
  const p = ev.payload || {};
  switch (ev.stage) {
    case "plan":
      step("orchestrator", ev.kind === "requirements" ? "requirements proposed" : "planning");
      if (ev.kind === "requirements") refreshState(true);
      break;
    case "run":
      if (ev.kind === "started") loadRuns();  // the runs list shows the status the header shows
      if (ev.kind === "replanned" && (p.requirements || []).length) refreshState();  // added requirements, before they are searched
      if (ev.kind === "iteration") step("orchestrator", `iteration ${ev.iteration}`);
      else if (ev.kind === "coverage") {
        step("orchestrator", `mean ${Number(p.mean_coverage || 0).toFixed(2)}`, "done");
        for (const [rid, c] of Object.entries(p.coverage || {})) setCoverage(rid, c);
      } else if (ev.kind === "finished" || ev.kind === "failed") step("orchestrator", ev.kind, ev.kind === "failed" ? "failed" : "done");
      else step("orchestrator", ev.kind);
      break;
    case "search":
      step("searcher", ev.kind === "results" ? `${p.found} found` : ev.kind, ev.kind.endsWith("failed") ? "failed" : "");
      if (ev.kind === "results") state.seen.found += Number(p.found || 0);
      if (ev.kind === "downloads") state.seen.downloaded += Number(p.downloaded || 0);
      showCounts();
      api(`/api/runs/${state.runId}`).then((s) => { $("n-egress").textContent = s.egress_requests; }).catch(() => {});
      break;
    case "ingest":
      if (ev.kind === "document") {
        state.seen.ingested.add(p.key || ev.seq); state.seen.failed.delete(p.key);  // a retry that worked
        step("ingestors", p.status || "stored", "done");
      }
      if (ev.kind === "failed") { state.seen.failed.add(p.key || ev.seq); addFailure(p.key || "?", p.reason || ev.message); step("ingestors", "failed", "failed"); }
      showCounts();
      break;
    case "forage": {
      const name = "forager " + (ev.requirement_id || "?");
      if (ev.kind === "coverage") { setCoverage(ev.requirement_id, Number(p.coverage || 0)); step(name, `cov ${Number(p.coverage || 0).toFixed(2)}`, "done"); }
      else if (ev.kind === "failed") { setCoverage(ev.requirement_id, 0, true); step(name, "failed", "failed"); }
      else if (ev.kind !== "actor") step(name, ev.kind, ev.kind.endsWith("failed") ? "failed" : "");
      break;
    }
    case "write":
      step("writer", ev.kind, ev.kind.endsWith("failed") ? "failed" : "");
      break;
  }
}

// -- report and citations ------------------------------------------------------------------------------------
async function showReport() {
  if (!$("report-box").hidden) return;
  const runId = state.runId;
  const [html, evidence, record] = await Promise.all([
    api(`/api/runs/${runId}/report.html`), api(`/api/runs/${runId}/evidence`).catch(() => []),
    api(`/api/runs/${runId}/artifacts/run.json`).catch(() => ({}))]);
  if (runId !== state.runId) return;
  state.evidence = evidence;
  state.sources = Array.isArray(record.sources) ? record.sources : [];
  // the fragment is rendered by markdown-it with raw HTML escaped: safe to insert. Parsed in an inert template
  // first, so the charts' relative figures/<name> links are not fetched (and shown broken) before loadFigures
  const tpl = document.createElement("template");
  tpl.innerHTML = html;
  for (const node of tpl.content.querySelectorAll('img[src^="figures/"], a[href^="figures/"]')) {
    const attr = node.tagName === "IMG" ? "src" : "href";
    node.dataset.figure = node.getAttribute(attr).slice("figures/".length);
    node.removeAttribute(attr);
  }
  $("report").replaceChildren(tpl.content);
  markSources();
  loadFigures(runId);
  for (const [id, name] of [["dl-report", "report.md"], ["dl-evidence", "evidence.jsonl"], ["dl-runjson", "run.json"]]) {
    // a link the browser follows sends no Authorization header: the token goes in the query (token mode only)
    $(id).href = `/api/runs/${runId}/artifacts/${name}` + (token() ? `?token=${encodeURIComponent(token())}` : "");
  }
  $("report-box").hidden = false;
  showAsks(runId);
}

// -- a source's standing: what a reader weighs it by (run.json's sources, from OpenAlex/arXiv: messages/write.py) ---
const OA_WORDS = { diamond: "open access (diamond)", gold: "open access (gold)", hybrid: "open access (hybrid)",
                   bronze: "free to read (bronze)", green: "open access (green: a repository copy)",
                   closed: "not open access" };

function sourceOf({ n, doc_id }) {
  return (state.sources || []).find((s) => (doc_id && s.doc_id === doc_id) || (n != null && s.n === n)) || null;
}

// badges for what is known of the source (none when nothing is: a local PDF never matched to a record)
function standing(src) {
  const span = el("span", { class: "standing" });
  if (!src) return span;
  if (src.is_retracted) {
    span.append(el("span", { class: "flag retracted", title: "OpenAlex marks this work retracted",
                             text: "RETRACTED: do not rely on it" }));
  }
  if (src.cited_by_count != null) span.append(el("span", { class: "flag", text: `cited by ${src.cited_by_count.toLocaleString("en")}` }));
  if (src.oa_status) span.append(el("span", { class: "flag oa", text: OA_WORDS[src.oa_status] || src.oa_status }));
  if (src.preprint_only) span.append(el("span", { class: "flag", text: "preprint only (not peer reviewed)" }));
  return span;
}

// Sources Consulted ("[n] Authors (Year) *Title*. … Cited by N. …", one paragraph each: the Writer wrote the standing
// into each entry) and every citation of a retracted source in the report: marked, so the warning shows at a glance
function markSources() {
  const heading = [...$("report").querySelectorAll("h2")].find((h) => h.textContent.trim() === "Sources Consulted");
  for (let node = heading && heading.nextElementSibling; node && node.tagName !== "H2"; node = node.nextElementSibling) {
    const first = node.tagName === "P" && node.querySelector("a.cite");
    const src = first && first.parentNode === node && sourceOf({ n: Number(first.dataset.n) });
    if (!src) continue;
    node.classList.add("source"); node.dataset.source = String(src.n);
    if (src.is_retracted) { node.classList.add("retracted"); node.append(standing({ is_retracted: true })); }
  }
  for (const a of $("report").querySelectorAll("a.cite")) {
    const src = sourceOf({ n: Number(a.dataset.n) });
    if (src && src.is_retracted) { a.classList.add("retracted"); a.title = "retracted (OpenAlex)"; }
  }
}

// -- asking a finished run: POST /api/runs/{id}/ask answers from its sources; GET .../asks lists the earlier ones --
function askItem(a) {
  const cited = el("ul", { class: "ask-cited" });
  for (const c of a.cited || []) {
    const link = el("a", { class: "cite", href: "#", "data-chunk": c.chunk_id, text: `[${c.n}]` });
    link.addEventListener("click", async (e) => {
      e.preventDefault();
      try { showChunk(await api(`/api/runs/${state.runId}/chunks/${encodeURIComponent(c.chunk_id)}`), null); }
      catch (err) { showChunk({ title: c.title, section_path: c.section_path, pages: [], text: String(err.message || err) }, null); }
    });
    cited.append(el("li", {}, link, " ", el("span", { text: `${c.title} — ${c.section_path}` }),
                    standing(sourceOf({ doc_id: c.doc_id }))));
  }
  return el("li", { class: "ask " + a.kind }, el("p", { class: "ask-q", text: a.question || "" }),
            el("p", { class: "ask-a", text: a.text }), cited);
}

async function showAsks(runId) {
  $("ask-box").hidden = false;
  try {
    const asks = await api(`/api/runs/${runId}/asks`);
    if (runId === state.runId) $("asks").replaceChildren(...asks.map(askItem));
  } catch (e) { $("ask-error").textContent = String(e.message || e); }
}

$("ask-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const runId = state.runId, question = $("ask-question").value.trim();
  if (!runId || !question) return;
  $("ask-error").textContent = ""; $("ask").disabled = true;
  try {
    const answer = await api(`/api/runs/${runId}/ask`, { method: "POST", body: JSON.stringify({ question }) });
    if (runId === state.runId) { $("asks").append(askItem(Object.assign({}, answer, { question: answer.question || question }))); $("ask-question").value = ""; }
  } catch (err) { $("ask-error").textContent = String(err.message || err); }
  finally { $("ask").disabled = false; }
});

// the report links its charts as figures/<name>; fetched through the API (with the token when there is one)
async function loadFigures(runId) {
  const nodes = [...$("report").querySelectorAll("[data-figure]")];
  const urls = {};
  for (const node of nodes) {
    const attr = node.tagName === "IMG" ? "src" : "href";
    const name = node.dataset.figure;
    if (!(name in urls)) {
      urls[name] = (async () => {
        const headers = token() ? { Authorization: "Bearer " + token() } : {};
        const resp = await fetch(`/api/runs/${runId}/figures/${encodeURIComponent(name)}`, { headers });
        if (!resp.ok) throw new Error(`${resp.status}`);
        return URL.createObjectURL(await resp.blob());
      })();
    }
    try {
      node.setAttribute(attr, await urls[name]);
      if (attr === "href") node.setAttribute("download", name);
    } catch (err) {
      node.title = `figure ${name} not available (${err.message || err})`;
    }
  }
}

$("report").addEventListener("click", async (e) => {
  const a = e.target.closest("a.cite");
  if (!a) return;
  e.preventDefault();
  const n = Number(a.dataset.n);
  const rows = (state.evidence || []).filter((r) => r.n === n);
  if (!rows.length) { showChunk({ title: `[${n}]`, section_path: "", pages: [], text: "no evidence recorded for this citation" }, null); return; }
  try { showChunk(await api(`/api/runs/${state.runId}/chunks/${encodeURIComponent(rows[0].chunk_id)}`), rows[0]); }
  catch (err) { showChunk({ title: `[${n}]`, section_path: "", pages: [], text: String(err.message || err) }, rows[0]); }
});
function showChunk(chunk, row) {
  $("chunk-title").textContent = chunk.title || chunk.doc_id || "";
  $("chunk-standing").replaceChildren(standing(sourceOf({ doc_id: (row && row.doc_id) || chunk.doc_id,
                                                          n: row && row.n })));
  $("chunk-where").textContent = `${chunk.section_path || ""}${chunk.pages && chunk.pages.length ? " · pages " + chunk.pages.join(", ") : ""}${chunk.chunk_id ? " · " + chunk.chunk_id : ""}`;
  $("chunk-quote").textContent = row && row.quote ? row.quote : "";
  $("chunk-quote").hidden = !(row && row.quote);
  $("chunk-text").textContent = chunk.text;
  $("chunk-view").hidden = false;
}
$("chunk-close").addEventListener("click", () => { $("chunk-view").hidden = true; });
$("chunk-view").addEventListener("click", (e) => { if (e.target.id === "chunk-view") $("chunk-view").hidden = true; });

// -- model choices: the backends, the gateway's default, the models its Ollama server has ---------------------------
async function loadModels() {
  try {
    const m = await api("/api/models");
    state.models = m;
    defaultModel();
    const names = [...m.ollama_models, ...(m.openai_models || [])];
    $("model-list").replaceChildren(...names.map((name) => el("option", { value: name })));
    const notes = [m.ollama_error ? m.ollama_error
      : `${m.ollama_models.length} model(s) on the Ollama server at ${m.ollama_host}`];
    if (m.backend === "openai") {
      notes.push(m.openai_error ? m.openai_error
        : `${m.openai_models.length} model(s) on the OpenAI-compatible server at ${m.openai_base_url}`);
    }
    // no model server answers (the default backend's, nor Ollama): the embedded backend runs without one, so the
    // form takes it unless the researcher chose a backend already, and says why
    const unreachable = m.backend === "ollama" ? Boolean(m.ollama_error)
      : m.backend === "openai" ? Boolean(m.openai_error && m.ollama_error) : false;
    if (unreachable && m.backends.includes("embedded") && $("backend").value === "") {
      $("backend").value = "embedded";
      defaultModel();
      notes.push("no model server answers, so the embedded backend is selected: a small model that ships with "
                 + "Forage and runs on this gateway's CPU (slower and less able; choose another backend once your "
                 + "server runs)");
      $("model-note").dataset.chose = "embedded";
    }
    $("model-note").textContent = notes.join("; ");
  } catch (e) { $("model-note").textContent = String(e.message || e); }
}
// the model field's placeholder follows the backend chosen: the gateway's default model, or the backend's own
function defaultModel() {
  const m = state.models;
  if (!m) return;
  const backend = $("backend").value || m.backend;
  $("model").placeholder = backend === m.backend ? `default: ${m.backend} ${m.model}`
    : backend === "embedded" ? "default: the embedded model" : `default: ${backend}'s default model`;
}
$("backend").addEventListener("change", defaultModel);
loadModels();

$("refresh-runs").addEventListener("click", loadRuns);
loadRuns();
openFromAddress();  // /#run=ID: that run's page at once (on reload too)
