// memory-agent web page: the DOM helper, the JSON API client and the connection watch.
// Plain JavaScript, no build step; the page's scripts share one global scope and load in order
// (index.html): api.js, markdown.js, chat-list.js, memory-panel.js, app.js.
"use strict";

const KEY_STORAGE = "memory-agent.api-key";
const tid = (id) => document.querySelector(`[data-testid="${id}"]`);

// An Enter that ends an IME composition (Japanese, Chinese, Korean…) picks the word: it must not
// send or save. Chrome and Firefox say so with isComposing; Safari only with keyCode 229.
const composing = (e) => e.isComposing || e.keyCode === 229;

// ------------------------------------------------------------------ DOM helper
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "class") node.className = value;
    else if (name === "testid") node.dataset.testid = value;
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// ------------------------------------------------------------------ API
class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// The server answered, then the reply's stream ended before its last event.
class StreamBroken extends Error {}

const UNREACHABLE = "The memory-agent server cannot be reached. Is `memory-agent serve` still running?";

const api = {
  key: localStorage.getItem(KEY_STORAGE) || "",

  headers(json) {
    const h = {};
    if (this.key) h.Authorization = `Bearer ${this.key}`;
    if (json) h["Content-Type"] = "application/json";
    return h;
  },

  async failure(res) {
    let body = null;
    try { body = await res.json(); } catch (_) { /* not JSON */ }
    const err = new ApiError(res.status, body?.error?.code || "http_error", body?.error?.message || res.statusText);
    if (res.status === 401) keyRefused(err.message); // revoked mid-session: ask for another (app.js)
    return err;
  },

  // fetch, with "the server cannot be reached" told apart from an answer (fetch only says "Failed to fetch").
  async send(path, init) {
    let res;
    try {
      res = await fetch(path, init);
    } catch (err) {
      connection.lost();
      throw new ApiError(0, "unreachable", UNREACHABLE);
    }
    connection.answered();
    return res;
  },

  async call(method, path, body) {
    const res = await this.send(path, {
      method,
      headers: this.headers(body !== undefined),
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    if (!res.ok) throw await this.failure(res);
    return res.status === 204 ? null : res.json();
  },

  // POST/PUT whose reply is Server-Sent Events; onEvent(name, data) for each event.
  // Exactly one of done, interrupt or error ends a complete stream: anything else is a broken one.
  async stream(method, path, body, onEvent) {
    const res = await this.send(path, { method, headers: this.headers(true), body: JSON.stringify(body) });
    if (!res.ok) throw await this.failure(res);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    let ended = false;
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const event = parseEvent(buffer.slice(0, cut));
          buffer = buffer.slice(cut + 2);
          if (!event) continue;
          if (["done", "interrupt", "error"].includes(event.name)) ended = true;
          onEvent(event.name, event.data);
        }
      }
    } catch (err) {
      throw new StreamBroken(`The connection to the server broke before the reply finished (${err.message}).`);
    }
    if (!ended) throw new StreamBroken("The connection to the server closed before the reply finished.");
  },
};

function parseEvent(block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith(":")) continue; // keep-alive comment
    if (line.startsWith("event:")) name = line.slice(6).trim();
    else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
  }
  return data.length ? { name, data: JSON.parse(data.join("\n")) } : null;
}

// ------------------------------------------------------------------ connection
// While the server cannot be reached: a banner that says so, and a retry every few seconds.
const connection = {
  down: false,
  timer: null,
  delay: 2000,

  lost() {
    if (this.down) return;
    this.down = true;
    this.delay = 2000;
    document.body.dataset.connection = "down";
    this.show(`${UNREACHABLE} Retrying…`);
    this.schedule();
  },

  show(text) {
    tid("connection-message").textContent = text;
    tid("connection-banner").hidden = false;
  },

  schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.probe(), this.delay);
    this.delay = Math.min(this.delay * 1.5, 15000);
  },

  async probe() {
    clearTimeout(this.timer);
    let res;
    try {
      res = await fetch("/healthz", { cache: "no-store" });
    } catch (_) {
      this.schedule();
      return;
    }
    if (res.ok) {
      await this.answered();
    } else {
      this.show("The server answers, but its database does not. Retrying…");
      this.schedule();
    }
  },

  async answered() {
    if (!this.down) return;
    this.down = false;
    clearTimeout(this.timer);
    delete document.body.dataset.connection;
    tid("connection-banner").hidden = true;
    if (!state.busy) await start().catch(() => {}); // the server's view again, after the gap
  },
};
