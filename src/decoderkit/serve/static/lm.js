// The GPT explorer: one page over POST /v1/explore (tokens, attention, next-token logits,
// logit lens) and GET /v1/models; no build step, no network beyond this server. Temperature,
// top-k and top-p are applied here to the model's real next-token logits, as the server's
// sampling applies them (top-k, then top-p on the tempered distribution).
"use strict";

const BARS = 20;  // next tokens shown
let view = null;  // the server's answer on screen
let ids = null;  // the tokens explored (the prompt, then the tokens stepped)
let prompted = 0;  // how many of ids were the prompt

async function loadModel() {
  try {
    const model = (await api("GET", "/v1/models")).data[0];
    $("model-info").textContent = `${model.id}: ${model.parameters.toLocaleString("en")} ` +
      `parameters, context ${model.max_model_len}, engine ${model.engine}`;
    $("status").textContent = "";
  } catch (err) {
    $("status").textContent = "model info: " + err.message;
  }
}

// A text (a new prompt) or token ids (the prompt and the tokens stepped so far).
async function explore(prompt) {
  $("status").textContent = "…";
  try {
    view = await api("POST", "/v1/explore", { prompt });
    ids = view.ids;
    if (typeof prompt === "string") prompted = ids.length;
    $("status").textContent = "";
    render();
  } catch (err) {
    $("status").textContent = err.message;
  }
}

function render() {
  $("result").hidden = false;
  $("tokens").replaceChildren(...view.tokens.map((t, i) =>
    el("span", i < prompted ? "chip" : "chip new", t)));
  fillSelect($("layer"), view.attention.length);
  fillSelect($("head"), view.attention[0].length);
  drawAttention();
  drawBars();
  $("lens").tBodies[0].replaceChildren(...view.lens.map((guesses, layer) => {
    const row = el("tr");
    row.append(el("td", "", String(layer)), el("td", "", guesses.map((g) =>
      `${JSON.stringify(g.token)} ${Math.exp(g.logprob).toFixed(3)}`).join("   ")));
    return row;
  }));
}

function drawAttention() {
  const w = view.attention[Number($("layer").value)][Number($("head").value)];
  drawHeatmap($("self-heatmap"), view.tokens, view.tokens, (i, j) => (j <= i ? w[i][j] : null));
}

// p over the vocabulary after temperature, top-k and top-p (greedy at temperature 0).
function distribution() {
  const logits = view.logits, V = logits.length;
  const t = Number($("temperature").value), k = Number($("topk").value);
  const topP = Number($("topp").value);
  let order = Array.from({ length: V }, (_, i) => i).sort((a, b) => logits[b] - logits[a]);
  if (t === 0) order = order.slice(0, 1);
  if (k > 0) order = order.slice(0, k);
  const best = logits[order[0]];
  let weights = order.map((i) => Math.exp((logits[i] - best) / (t || 1)));
  let total = weights.reduce((a, b) => a + b, 0);
  if (topP < 1) {  // the smallest set whose mass reaches top-p (the most likely always kept)
    let before = 0, keep = 0;
    while (keep < order.length && before < topP * total) before += weights[keep++];
    order = order.slice(0, keep);
    weights = weights.slice(0, keep);
    total = weights.reduce((a, b) => a + b, 0);
  }
  return order.map((id, n) => ({ id, p: weights[n] / total }));
}

function drawBars() {
  $("temperature-value").textContent = Number($("temperature").value).toFixed(2);
  $("topp-value").textContent = Number($("topp").value).toFixed(2);
  const names = Object.fromEntries(view.top.map((t) => [t.id, t.token]));
  const nodes = [];
  for (const { id, p } of distribution().slice(0, BARS)) {
    const bar = el("span", "bar");
    bar.style.width = `${(p * 100).toFixed(2)}%`;
    nodes.push(el("span", "bar-token", JSON.stringify(names[id] ?? `#${id}`)), bar,
      el("span", "muted", p.toFixed(4)));
  }
  $("bars").replaceChildren(...nodes);
}

function step() {
  const dist = distribution();
  let r = Math.random(), chosen = dist[dist.length - 1].id;
  for (const { id, p } of dist) {
    if ((r -= p) <= 0) { chosen = id; break; }
  }
  explore([...ids, chosen]);
}

$("token").value = sessionStorage.getItem("decoderkit-token") || "";
$("query").addEventListener("submit", (event) => {
  event.preventDefault();
  explore($("text").value);
});
for (const id of ["temperature", "topk", "topp"]) $(id).addEventListener("input", drawBars);
$("layer").addEventListener("change", drawAttention);
$("head").addEventListener("change", drawAttention);
$("step").addEventListener("click", step);
$("token").addEventListener("change", loadModel);
loadModel();
