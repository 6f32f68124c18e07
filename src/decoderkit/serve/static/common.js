// What the two explorer pages share (translation: explorer.js, GPT: lm.js): DOM helpers, the
// API call with the page's bearer token, and the attention heatmap. No build step.
"use strict";

const $ = (id) => document.getElementById(id);
function authHeaders() {
  const token = $("token").value.trim();
  if (token) sessionStorage.setItem("decoderkit-token", token);
  return token ? { Authorization: "Bearer " + token } : {};
}

async function api(method, path, body) {
  const response = await fetch(path, {
    method,
    headers: { "Content-Type": "application/json", ...authHeaders() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({ error: response.statusText }));
  if (!response.ok) {  // the translation API's error is a string, the LM API's OpenAI's object
    const message = typeof data.error === "string" ? data.error : data.error?.message;
    throw new Error(`${response.status}: ${message || response.statusText}`);
  }
  return data;
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function fillSelect(select, n) {
  const keep = Number(select.value) || 0;
  select.replaceChildren(...Array.from({ length: n }, (_, i) => el("option", "", String(i))));
  select.value = String(keep < n ? keep : 0);
}

// rows x cols cells (plus labels); weight(i, j) in [0, 1], null for a blocked position.
function drawHeatmap(box, rows, cols, weight) {
  box.style.gridTemplateColumns = `auto repeat(${cols.length}, 22px)`;
  const nodes = [el("span", "label")];
  cols.forEach((c, j) => {
    const label = el("span", "label", c);
    label.dataset.col = j;
    nodes.push(label);
  });
  rows.forEach((r, i) => {
    const label = el("span", "label rowlabel", r);
    label.dataset.row = i;
    nodes.push(label);
    cols.forEach((_, j) => {
      const w = weight(i, j);
      const cell = el("span", w === null ? "cell empty" : "cell");
      cell.dataset.row = i;
      cell.dataset.col = j;
      if (w !== null) {
        cell.dataset.w = w;
        cell.style.background = `rgba(44, 95, 214, ${w.toFixed(4)})`;
        cell.title = `${r} -> ${cols[j]}: ${w.toFixed(3)}`;
      }
      nodes.push(cell);
    });
  });
  box.replaceChildren(...nodes);
}
