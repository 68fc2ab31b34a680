// The API page: every operation of /openapi.json with its parameters, form fields and answers.
// GET operations can be tried here (with the token typed above); nothing is loaded from elsewhere.
"use strict";

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function fieldsTable(rows) {
  const table = el("table", {}, el("tr", {}, el("th", {}, "name"), el("th", {}, "in"), el("th", {}, "type"),
                                   el("th", {}, "description")));
  for (const r of rows) table.append(el("tr", {}, el("td", {}, el("code", {}, r.name)), el("td", {}, r.where),
                                        el("td", {}, r.type), el("td", {}, r.description || "")));
  return table;
}

function typeOf(schema) {
  if (!schema) return "";
  if (schema.enum) return schema.enum.join(" | ");
  if (schema.type === "array") return typeOf(schema.items) + "[]";
  return schema.format === "binary" ? "file" : (schema.type || "");
}

function tryIt(path, params) {
  const inputs = params.filter(p => p.in === "path" || p.in === "query")
    .map(p => el("input", {"data-name": p.name, "data-in": p.in, placeholder: p.name}));
  const out = el("pre", {});
  const button = el("button", {type: "button"}, "Try it");
  button.addEventListener("click", async () => {
    let url = path;
    const query = new URLSearchParams();
    for (const i of inputs) {
      if (i.dataset.in === "path") url = url.replace("{" + i.dataset.name + "}", encodeURIComponent(i.value));
      else if (i.value) query.set(i.dataset.name, i.value);
    }
    const token = document.getElementById("token").value.trim();
    const headers = token ? {Authorization: "Bearer " + token} : {};
    const q = query.toString();
    try {
      const r = await fetch(url + (q ? "?" + q : ""), {headers});
      out.textContent = r.status + " " + r.statusText + "\n" + (await r.text()).slice(0, 20000);
    } catch (e) {
      out.textContent = String(e);
    }
  });
  return el("div", {}, ...inputs, button, out);
}

function operation(path, method, op) {
  const params = op.parameters || [];
  const rows = params.map(p => ({name: p.name, where: p.in, type: typeOf(p.schema), description: p.description}));
  const form = op.requestBody && op.requestBody.content && op.requestBody.content["multipart/form-data"];
  if (form && form.schema && form.schema.properties) {
    for (const [name, s] of Object.entries(form.schema.properties)) {
      rows.push({name, where: "form", type: typeOf(s), description: s.description});
    }
  }
  const answers = Object.entries(op.responses || {}).map(([code, r]) => code + " " + (r.description || ""));
  const section = el("section", {class: "op"},
    el("div", {}, el("span", {class: "method " + method}, method), el("code", {}, path)),
    el("p", {}, op.description || op.summary || ""));
  if (rows.length) section.append(fieldsTable(rows));
  section.append(el("p", {}, "Answers: " + answers.join("; ")));
  if (method === "get") section.append(tryIt(path, params));
  return section;
}

async function main() {
  const ops = document.getElementById("ops");
  let spec;
  try {
    spec = await (await fetch("/openapi.json")).json();
  } catch (e) {
    ops.textContent = "Could not read /openapi.json: " + e;
    return;
  }
  document.getElementById("title").textContent = spec.info.title + " " + spec.info.version;
  document.getElementById("description").textContent = spec.info.description || "";
  ops.textContent = "";
  for (const [path, item] of Object.entries(spec.paths)) {
    for (const [method, op] of Object.entries(item)) ops.append(operation(path, method, op));
  }
}

main();
