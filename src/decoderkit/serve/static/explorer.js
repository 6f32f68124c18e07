// The decoderkit explorer: one page over the public HTTP API (GET /v1/model,
// POST /v1/translate with "explain"), no build step, no network beyond this server.
"use strict";

const HIGHLIGHT = 0.5;  // a source cell is highlighted at >= this fraction of its row's max
let shown = null;  // the result on screen: {result, steps}
let unavailable = {};  // request features this server's engine cannot give: name -> why

async function loadModel() {
  try {
    const info = await api("GET", "/v1/model");
    const c = info.config;
    $("model-info").textContent = `${c.n_layers}+${c.n_layers} layers, d_model ${c.d_model}, ` +
      `${c.n_heads} heads, ${info.parameters.toLocaleString("en")} parameters` +
      (info.step === null ? "" : `, step ${info.step}`) + `, engine ${info.engine}`;
    unavailable = info.unavailable || {};
    const lacking = Object.entries(unavailable).map(([name, why]) => `${name} (${why})`);
    $("lacking").hidden = lacking.length === 0;
    $("lacking").textContent = lacking.length ? `Not available with engine ${info.engine}: ` +
      lacking.join("; ") + "." : "";
    $("topk").disabled = "explain" in unavailable;
    $("nbest-count").disabled = "n_best" in unavailable;
    $("beam").max = info.limits.max_beam;
    $("nbest-count").max = info.limits.max_beam;
    $("topk").max = Math.max(1, info.limits.max_explain);
    $("text").maxLength = info.limits.max_chars;
    $("status").textContent = "";
  } catch (err) {
    $("status").textContent = "model info: " + err.message;
  }
}

function request() {
  const beam = $("method").value === "beam" ? Number($("beam").value) : 1;
  return {
    inputs: [$("text").value],
    beam,
    n_best: beam > 1 && !("n_best" in unavailable) ?
      Math.min(Number($("nbest-count").value), beam) : 1,
    explain: "explain" in unavailable ? 0 : Number($("topk").value),
  };
}

async function translate(event) {
  event.preventDefault();
  $("status").textContent = "translating...";
  $("go").disabled = true;
  try {
    const data = await api("POST", "/v1/translate", request());
    const result = data.results[0];
    if (result.error) throw new Error(result.error);
    render(result);
    $("status").textContent = "";
  } catch (err) {
    $("status").textContent = err.message;
  } finally {
    $("go").disabled = false;
  }
}

function render(result) {
  const steps = result.steps || [];
  shown = { result, steps };
  $("translation").textContent = result.text;
  $("score").textContent = `score ${result.score.toFixed(3)}, stop: ${result.stop_reason}`;
  const tokens = $("tokens");
  tokens.replaceChildren(...result.tokens.map((t, i) => {
    const chip = el("span", "chip", t);
    chip.dataset.row = i;
    return chip;
  }));
  $("source").replaceChildren(...result.source_tokens.map((t, j) => {
    const chip = el("span", "chip", t);
    chip.dataset.col = j;
    return chip;
  }));
  const hyps = result.nbest || [{ text: result.text, score: result.score }];
  $("nbest").replaceChildren(...hyps.map((h) =>
    el("li", "", `${h.text}   (${h.score.toFixed(3)})`)));
  fillSelect($("layer"), steps.length ? steps[0].cross_attention.length : 0);
  fillSelect($("head"), steps.length ? steps[0].cross_attention[0].length : 0);
  drawMaps();
  drawSteps(steps);
  $("explain-box").hidden = steps.length === 0;  // none asked: the engine cannot give them
  $("result").hidden = false;
}

function drawMaps() {
  const { result, steps } = shown;
  const layer = Number($("layer").value), head = Number($("head").value);
  const outputs = steps.map((s) => s.token);
  const inputs = ["<s>", ...outputs.slice(0, -1)];  // BOS, then each output fed back
  drawHeatmap($("cross-heatmap"), outputs, result.source_tokens,
    (i, j) => steps[i].cross_attention[layer][head][j]);
  drawHeatmap($("self-heatmap"), outputs, inputs,
    (i, j) => (j <= i ? steps[i].self_attention[layer][head][j] : null));
}

function drawSteps(steps) {
  $("steps").tBodies[0].replaceChildren(...steps.map((s) => {
    const row = el("tr");
    row.append(el("td", "", String(s.step)), el("td", "taken", s.token),
      el("td", "", Math.exp(s.logprob).toFixed(3)));
    const alts = el("td");
    for (const a of s.alternatives) {
      alts.append(el("span", a.id === s.id ? "alt taken" : "alt",
        `${a.token} ${Math.exp(a.logprob).toFixed(3)}`));
    }
    row.append(alts);
    return row;
  }));
}

// Hover an output token (a chip, a row label or a row's cell): mark the source tokens it
// attends to in the selected layer and head.
function highlight(row) {
  document.querySelectorAll(".hl, .active, .row-active").forEach((n) =>
    n.classList.remove("hl", "active", "row-active"));
  if (row === null || !shown) return;
  document.querySelectorAll(`#tokens .chip[data-row="${row}"]`).forEach((n) =>
    n.classList.add("active"));
  document.querySelectorAll(`.heatmap .rowlabel[data-row="${row}"]`).forEach((n) =>
    n.classList.add("row-active"));
  const cells = [...document.querySelectorAll(`#cross-heatmap .cell[data-row="${row}"]`)];
  const top = Math.max(...cells.map((c) => Number(c.dataset.w)));
  for (const cell of cells) {
    if (Number(cell.dataset.w) < HIGHLIGHT * top) continue;
    const col = cell.dataset.col;
    cell.classList.add("hl");
    document.querySelectorAll(`#source .chip[data-col="${col}"], ` +
      `#cross-heatmap .label[data-col="${col}"]`).forEach((n) => n.classList.add("hl"));
  }
}

function onHover(event) {
  const target = event.target.closest("[data-row]");
  highlight(target ? target.dataset.row : null);
}

$("token").value = sessionStorage.getItem("decoderkit-token") || "";
$("query").addEventListener("submit", translate);
$("layer").addEventListener("change", drawMaps);
$("head").addEventListener("change", drawMaps);
for (const id of ["tokens", "cross-heatmap", "self-heatmap"]) {
  $(id).addEventListener("mouseover", onHover);
  $(id).addEventListener("mouseleave", () => highlight(null));
}
$("token").addEventListener("change", loadModel);
loadModel();
