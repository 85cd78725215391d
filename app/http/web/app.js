// memory-agent web page: chats, streaming replies (Markdown), stop, regenerate, edit, rename,
// and what the agent remembers. Plain JavaScript against the JSON API of the same server;
// no build step. marked and DOMPurify are vendored files (app/http/web/vendor/).
"use strict";

const KEY_STORAGE = "memory-agent.api-key";
const tid = (id) => document.querySelector(`[data-testid="${id}"]`);

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
    return new ApiError(res.status, body?.error?.code || "http_error", body?.error?.message || res.statusText);
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

// ------------------------------------------------------------------ state
const state = {
  user: null,
  personas: [],
  chats: [],
  chatId: null,
  detail: null,
  busy: false,
  blocked: null, // why the last message was not sent (409), shown until the next send
  notes: {}, // AI message id → lines such as "Remembered: …"
  pollTimer: null,
};

// ------------------------------------------------------------------ small formatting helpers
function ago(iso) {
  const seconds = (Date.now() - new Date(iso).getTime()) / 1000;
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

// A message's time as people read it: the time alone today, else the date and time.
function messageTime(iso) {
  const when = new Date(iso);
  const today = new Date().toDateString() === when.toDateString();
  const time = when.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return today ? time : `${when.toLocaleDateString()} ${time}`;
}

function setStatus(text, kind = "") {
  const status = tid("composer-status");
  status.textContent = text;
  status.className = `composer-status ${kind}`;
}

function scrollToEnd() {
  const box = tid("messages");
  box.scrollTop = box.scrollHeight;
}

// The user's words and the date they meant when said ("next Tuesday, 2026-12-01"); core/dates.py due_phrase.
function duePhrase(item) {
  if (item.due && item.due_date && !item.due.includes(item.due_date)) return `${item.due}, ${item.due_date}`;
  return item.due || item.due_date || "";
}

function describeInterrupt(value) {
  if (value && value.type === "task_change") {
    const verb = { add: "add a task", update: "update a task", complete: "mark a task done" }[value.action] || value.action;
    return `The agent wants to ${verb}: “${value.description}”${duePhrase(value) ? ` (due ${duePhrase(value)})` : ""}.`;
  }
  if (value && value.type === "forget") {
    const items = (value.items || []).join("; ") || value.what;
    return `The agent wants to forget, everywhere it is kept: “${items}”.`;
  }
  return `The agent asks for a confirmation: ${JSON.stringify(value)}`;
}

// Give a message that was not sent back to the box, unless something new was typed meanwhile.
function restoreInput(text) {
  const input = tid("message-input");
  if (text && !input.value.trim()) input.value = text;
}

// ------------------------------------------------------------------ Markdown
const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

function setUpMarkdown() {
  if (!window.marked || !window.DOMPurify) return;
  marked.use({
    gfm: true,
    breaks: true, // a model's single line breaks are meant as line breaks
    renderer: {
      // Images become links: a reply must not make the browser fetch URLs on its own
      // (an image URL can carry chat content to a third party).
      image({ href, text }) {
        return `<a href="${escapeHtml(href || "")}">${escapeHtml(text || href || "image")}</a>`;
      },
    },
  });
  DOMPurify.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A" && node.hasAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", "noopener noreferrer");
    }
  });
}

// A reply's Markdown as sanitized DOM: no script, handler, style, form or image survives.
function renderMarkdown(target, text) {
  if (!window.marked || !window.DOMPurify) {
    target.textContent = text; // the libraries are missing: plain text is still safe
    return;
  }
  const fragment = DOMPurify.sanitize(marked.parse(text), {
    RETURN_DOM_FRAGMENT: true,
    FORBID_TAGS: ["style", "img", "form", "input", "button", "textarea", "select", "iframe", "video", "audio"],
    FORBID_ATTR: ["style"],
  });
  for (const pre of fragment.querySelectorAll("pre")) pre.replaceWith(codeBlock(pre));
  for (const table of fragment.querySelectorAll("table")) table.replaceWith(el("div", { class: "table-wrap" }, table.cloneNode(true)));
  target.replaceChildren(fragment);
}

function codeBlock(pre) {
  const code = pre.querySelector("code");
  const language = (code?.className.match(/language-([\w+#.-]+)/) || [])[1] || "code";
  const copy = el("button", { type: "button", class: "copy-code", testid: "copy-code", title: "Copy the code" }, "Copy");
  copy.addEventListener("click", () => copyWithFeedback(copy, (code || pre).textContent.replace(/\n$/, ""))); // marked ends code with a newline
  return el("div", { class: "code-block", testid: "code-block" }, el("div", { class: "code-head" }, el("span", {}, language), copy), pre.cloneNode(true));
}

async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch (_) {
    // No clipboard API (plain http on another host than localhost): the old way.
    const area = el("textarea", { "aria-hidden": "true" });
    // Set through the CSSOM: the page's CSP refuses style attributes.
    area.style.position = "fixed";
    area.style.opacity = "0";
    area.value = text;
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok;
  }
}

async function copyWithFeedback(button, text) {
  const label = button.textContent;
  button.textContent = (await copyText(text)) ? "Copied ✓" : "Copy failed";
  setTimeout(() => { button.textContent = label; }, 1500);
}

// ------------------------------------------------------------------ drawers and panels
const wideScreen = matchMedia("(min-width: 1101px)"); // three columns: the memory panel fits beside the chat
const phoneScreen = matchMedia("(max-width: 760px)"); // one column: the chat list is a drawer

function setMemoryOpen(open) {
  document.body.dataset.memory = open ? "open" : "closed";
  tid("toggle-memory").setAttribute("aria-expanded", String(open));
  if (open && phoneScreen.matches) setChatsOpen(false);
  updateScrim();
}

function setChatsOpen(open) {
  document.body.dataset.chats = open ? "open" : "closed";
  tid("open-chats").setAttribute("aria-expanded", String(open));
  if (open && !wideScreen.matches) setMemoryOpen(false);
  updateScrim();
}

function updateScrim() {
  const overlay = (!wideScreen.matches && document.body.dataset.memory === "open") || (phoneScreen.matches && document.body.dataset.chats === "open");
  tid("scrim").hidden = !overlay;
}

function closeDrawers() {
  if (phoneScreen.matches) setChatsOpen(false);
  if (!wideScreen.matches) setMemoryOpen(false);
}

// ------------------------------------------------------------------ API key
function takeKeyFromHash() {
  const match = location.hash.match(/key=([^&]+)/);
  if (match) {
    api.key = decodeURIComponent(match[1]);
    localStorage.setItem(KEY_STORAGE, api.key);
    history.replaceState(null, "", location.pathname + location.search);
  }
}

async function whoAmI() {
  try {
    state.user = await api.call("GET", "/me");
    tid("user-badge").textContent = state.user.user_id;
    return true;
  } catch (err) {
    if (err.status === 401) return false;
    throw err;
  }
}

function askForKey(message = "") {
  tid("key-error").textContent = message;
  const dialog = tid("key-dialog");
  if (!dialog.open) dialog.showModal();
  tid("key-input").focus();
}

async function saveKey(event) {
  event.preventDefault();
  api.key = tid("key-input").value.trim();
  try {
    if (!(await whoAmI())) {
      askForKey("That key is unknown or revoked.");
      return;
    }
  } catch (err) {
    askForKey(err.message);
    return;
  }
  localStorage.setItem(KEY_STORAGE, api.key);
  tid("key-dialog").close();
  tid("key-input").value = "";
  await loadAll();
}

// ------------------------------------------------------------------ chats
async function loadChats() {
  state.chats = (await api.call("GET", "/chats")).chats;
  renderChatList();
}

function chatItem(chat, score) {
  const meta = `${ago(chat.last_activity)} · ${chat.message_count} messages`;
  return el(
    "button",
    {
      type: "button",
      class: `chat-item${chat.id === state.chatId ? " active" : ""}`,
      testid: score === undefined ? "chat-item" : "search-result",
      "data-chat-id": chat.id,
      onclick: () => {
        if (phoneScreen.matches) setChatsOpen(false);
        openChat(chat.id);
      },
    },
    el("span", { class: "chat-item-title" }, el("span", { class: "title-text" }, chat.title), score !== undefined ? el("span", { class: "score" }, score.toFixed(2)) : null),
    chat.summary_snippet ? el("span", { class: "chat-item-snippet" }, chat.summary_snippet.replace(/^Recently: /, "")) : null,
    el("span", { class: "chat-item-meta" }, meta),
  );
}

function renderChatList() {
  const nav = tid("chat-list");
  nav.replaceChildren(...(state.chats.length ? state.chats.map((c) => chatItem(c)) : [el("p", { class: "empty" }, "No chats yet.")]));
}

async function openChat(chatId) {
  clearTimeout(state.pollTimer);
  if (chatId !== state.chatId) state.blocked = null;
  state.chatId = chatId;
  try {
    state.detail = await api.call("GET", `/chats/${chatId}`);
  } catch (err) {
    if (err.code === "unreachable") return; // keep what is on screen; the banner says why
    state.chatId = null;
    state.detail = null;
    setStatus(err.message, "error");
    await loadChats();
    renderChat();
    return;
  }
  renderChatList();
  renderChat();
  renderSummary();
  // A reply running elsewhere (another tab): look again until it is done.
  if (state.detail.running && !state.busy) state.pollTimer = setTimeout(() => state.chatId === chatId && !state.busy && openChat(chatId), 1500);
}

async function newChat(event) {
  event?.preventDefault();
  const persona = tid("persona-select").value || "assistant";
  const detail = await api.call("POST", "/chats", { persona });
  if (phoneScreen.matches) setChatsOpen(false);
  await loadChats();
  await openChat(detail.chat.id);
  tid("message-input").focus();
}

async function deleteChat() {
  if (!state.chatId || !confirm("Delete this chat and its history? What the agent learned about you stays in memory.")) return;
  try {
    await api.call("DELETE", `/chats/${state.chatId}`);
  } catch (err) {
    setStatus(err.message, "error");
    return;
  }
  state.chatId = null;
  state.detail = null;
  state.blocked = null;
  renderChat();
  renderSummary();
  await loadChats();
}

function startRename() {
  if (!state.detail || tid("title-input")) return;
  const title = tid("chat-title");
  const input = el("input", { type: "text", class: "title-input", testid: "title-input", maxlength: 200, "aria-label": "Chat title" });
  input.value = state.detail.chat.title;
  let finished = false;
  const finish = async (save) => {
    if (finished) return;
    finished = true;
    const text = input.value.trim();
    if (save && text && text !== state.detail?.chat.title) {
      try {
        const chat = await api.call("PATCH", `/chats/${state.chatId}`, { title: text });
        if (state.detail?.chat.id === chat.id) state.detail.chat = chat;
        await loadChats();
      } catch (err) {
        setStatus(err.message, "error");
      }
    }
    input.remove();
    title.hidden = false;
    renderChatHeader();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") finish(true);
    if (e.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
  title.hidden = true;
  tid("rename-chat").hidden = true;
  title.after(input);
  input.focus();
  input.select();
}

// ------------------------------------------------------------------ the open chat
function tag(text, kind, title, testid) {
  return el("span", { class: `tag ${kind}`, title, testid }, text);
}

function messageNode(message, lastReplyId) {
  if (message.role === "tool") {
    return el("div", { class: "note tool", testid: "tool-note" }, `${message.tool_name || "tool"} → ${message.content}`);
  }
  if (message.role === "assistant" && message.tool_calls.length && !message.content) {
    const calls = message.tool_calls.map((c) => `${c.name}(${JSON.stringify(c.args)})`).join(", ");
    return el("div", { class: "note tool" }, `calls ${calls}`);
  }
  const isUser = message.role === "user";
  const body = el("div", { class: "message-body" });
  if (isUser) body.textContent = message.content;
  else renderMarkdown(body, message.content);
  const bubble = el(
    "article",
    {
      class: `message ${isUser ? "user" : "assistant"}${message.in_model_view ? "" : " folded"}${message.stopped ? " stopped" : ""}`,
      testid: isUser ? "user-message" : "assistant-message",
      "data-message-id": message.id,
    },
    body,
  );
  const actions = el("div", { class: "message-actions" });
  if (message.sent_at) {
    actions.append(el("time", { class: "message-time", datetime: message.sent_at, title: new Date(message.sent_at).toLocaleString(), testid: "message-time" }, messageTime(message.sent_at)));
  }
  if (!message.in_model_view) actions.append(tag("in summary", "", "Folded into the summary the model sees"));
  if (message.forgotten) {
    actions.append(tag("forgotten", "forgotten", "You had the agent forget what this message says: no model sees it. It stays here as you wrote it until you delete it.", "forgotten-tag"));
    actions.append(el("button", {
      type: "button", testid: "delete-message", title: "Delete this message for good",
      onclick: async () => {
        if (!confirm("Delete this message for good? The chat's undo history goes with it.")) return;
        try { await api.call("DELETE", `/chats/${state.chatId}/messages/${message.id}`); } catch (err) { setStatus(err.message, "error"); }
        await openChat(state.chatId);
      },
    }, "Delete"));
  }
  if (message.stopped) {
    actions.append(tag("■ stopped", "stopped", "You stopped this reply. It is kept as far as it got; memory learned nothing from this turn. Regenerate it for a full reply.", "stopped-tag"));
  }
  for (const line of state.notes[message.id] || []) actions.append(el("span", { class: "memory-note", testid: "memory-note" }, line));
  const turn = el("div", { class: `turn ${isUser ? "user" : "assistant"}` }, bubble, actions);
  if (isUser) {
    actions.append(el("button", { type: "button", testid: "edit-message", title: "Edit and regenerate from here", onclick: () => startEdit(turn, bubble, message) }, "✎ Edit"));
  } else {
    const copy = el("button", { type: "button", testid: "copy-reply", title: "Copy this reply (Markdown)" }, "Copy");
    copy.addEventListener("click", () => copyWithFeedback(copy, message.content));
    actions.append(copy);
    if (message.id === lastReplyId) {
      actions.append(el("button", { type: "button", testid: "regenerate", title: "Answer this message again", onclick: () => regenerate(turn, message) }, "↻ Regenerate"));
    }
  }
  return turn;
}

function renderChatHeader() {
  const detail = state.detail;
  tid("delete-chat").hidden = !detail;
  tid("rename-chat").hidden = !detail || Boolean(tid("title-input"));
  if (!detail) {
    tid("chat-title").textContent = "No chat open";
    tid("chat-meta").textContent = "Start a new chat, or pick one from the chat list.";
    return;
  }
  const persona = state.personas.find((p) => p.name === detail.chat.persona);
  tid("chat-title").textContent = detail.chat.title;
  tid("chat-title").title = detail.chat.title_set_by_user ? "Your title (double-click to rename)" : "Titled by the agent (double-click to rename)";
  const folds = detail.model_view.summary_folds;
  tid("chat-meta").textContent =
    `${persona ? persona.title : detail.chat.persona} · ${detail.messages.length} messages` +
    (folds ? ` · ${detail.messages.filter((m) => !m.in_model_view).length} folded into the summary` : "");
}

// The last assistant reply of the chat's current branch: the one Regenerate offers.
function lastReplyId(messages) {
  const last = [...messages].reverse().find((m) => m.role === "assistant" && !m.tool_calls.length);
  return last && messages[messages.length - 1] === last ? last.id : null;
}

function renderChat() {
  const box = tid("messages");
  const detail = state.detail;
  renderChatHeader();
  renderNotice();
  if (!detail) {
    box.replaceChildren(el("div", { class: "placeholder" }, "Say something: the agent remembers what matters about you across chats."));
    return;
  }
  const replyId = detail.pending_interrupts.length ? null : lastReplyId(detail.messages);
  const nodes = detail.messages.map((m) => messageNode(m, replyId));
  const firstSeen = detail.messages.findIndex((m) => m.in_model_view);
  if (firstSeen > 0) {
    // Where the model's view begins: above it, the model sees only the summary.
    nodes.splice(firstSeen, 0, el("div", { class: "fold-line", testid: "fold-line" }, "above: folded into the summary · below: what the model sees"));
  }
  if (!nodes.length) nodes.push(el("div", { class: "placeholder" }, "No messages yet."));
  box.replaceChildren(...nodes);
  for (const pending of detail.pending_interrupts) box.append(interruptCard(pending));
  scrollToEnd();
}

// What this tab should know about the chat beyond its messages: a reply written elsewhere,
// or why its own message was not sent. It stays until it no longer holds.
function renderNotice() {
  const notice = tid("chat-notice");
  const running = Boolean(state.detail?.running) && !state.busy;
  document.body.dataset.running = running ? "1" : "";
  const parts = [];
  if (state.blocked?.code === "reply_in_progress") {
    parts.push(
      el("strong", {}, "Not sent: "),
      "a reply is already being written on this chat, probably in another tab or window. Your message is still in the box. ",
      running ? "This tab shows that reply when it is done." : "That reply is done now: press Send.",
    );
  } else if (state.blocked) {
    parts.push(el("strong", {}, "Not sent: "), state.blocked.message, " Your message is still in the box.");
  } else if (running) {
    parts.push("A reply is being written on this chat in another tab or window; it shows up here when it is done. ");
  }
  if (running) parts.push(" ", el("button", { type: "button", class: "link", testid: "stop-other", onclick: stop }, "Stop it"));
  notice.replaceChildren(...parts);
  notice.hidden = !parts.length;
}

function interruptCard(pending) {
  const decide = (approved) => async () => {
    card.remove();
    await runTurn("POST", `/chats/${state.chatId}/resume`, { approved, interrupt_id: pending.id }, { userText: null });
  };
  const card = el(
    "div",
    { class: "interrupt", testid: "interrupt" },
    el("p", {}, describeInterrupt(pending.value)),
    el(
      "div",
      { class: "interrupt-actions" },
      el("button", { type: "button", class: "primary", testid: "approve", onclick: decide(true) }, "Approve"),
      el("button", { type: "button", class: "ghost", testid: "decline", onclick: decide(false) }, "Decline"),
    ),
  );
  return card;
}

// The reply being streamed: Markdown re-rendered at most once a frame, a cursor while it runs.
function streamingReply() {
  const body = el("div", { class: "message-body" });
  const bubble = el("article", { class: "message assistant streaming", testid: "assistant-message" }, body);
  const actions = el("div", { class: "message-actions" });
  const reply = {
    turn: el("div", { class: "turn assistant" }, bubble, actions),
    text: "",
    frame: 0,
    add(piece) {
      this.text += piece;
      if (!this.frame) this.frame = requestAnimationFrame(() => this.render());
    },
    render() {
      this.frame = 0;
      renderMarkdown(body, this.text);
      if (bubble.classList.contains("streaming")) {
        let at = body.lastElementChild;
        while (at && /^(UL|OL|BLOCKQUOTE)$/.test(at.tagName) && at.lastElementChild) at = at.lastElementChild;
        (at && /^(P|LI|H[1-6])$/.test(at.tagName) ? at : body).append(el("span", { class: "cursor", "aria-hidden": "true" }, "▍"));
      }
      scrollToEnd();
    },
    end() {
      cancelAnimationFrame(this.frame);
      bubble.classList.remove("streaming");
      this.render();
    },
    broken(why) {
      bubble.classList.add("broken");
      actions.append(tag("connection lost", "broken", why, "broken-tag"));
    },
  };
  return reply;
}

// A streamed turn: a user bubble (unless resuming or regenerating), a reply bubble filled token by token.
async function runTurn(method, path, body, { userText }) {
  const box = tid("messages");
  box.querySelector(".placeholder")?.remove();
  clearTimeout(state.pollTimer);
  state.blocked = null;
  renderNotice();
  const userTurn = userText === null
    ? null
    : el("div", { class: "turn user" }, el("article", { class: "message user pending", testid: "user-message" }, el("div", { class: "message-body" }, userText)));
  const reply = streamingReply();
  if (userTurn) box.append(userTurn);
  box.append(reply.turn);
  scrollToEnd();
  setBusy(true);
  setStatus("Writing…");
  const notes = [];
  let outcome = "error";
  try {
    await api.stream(method, path, body, (name, data) => {
      if (name === "token") {
        reply.add(data.text);
      } else if (name === "memory") {
        notes.push(data.described ? `Remembered: ${data.described}` : `Memory not updated: ${data.error}`);
      } else if (name === "summary" && data.folded_messages) {
        notes.push(`Summary updated (${data.folded_messages} messages folded)`);
      } else if (name === "done") {
        outcome = "done";
        if (data.message_id && notes.length) state.notes[data.message_id] = notes;
        setStatus(`${data.tokens_in} tokens in · ${data.tokens_out} out · ${(data.elapsed_ms / 1000).toFixed(1)} s`);
      } else if (name === "interrupt") {
        outcome = "interrupt";
        setStatus("Waiting for your confirmation.");
      } else if (name === "error") {
        outcome = data.code;
        setStatus(data.message, data.code === "stopped" ? "" : "error");
        restoreInput(data.text); // a discarded message comes back to the box
      }
    });
  } catch (err) {
    if (err instanceof StreamBroken) {
      // The server may still finish it (a reply does not depend on this connection): reload below.
      outcome = "broken";
      reply.broken(err.message);
      setStatus(err.message, "error");
    } else {
      // Not sent at all: nothing of it stays on screen, the text goes back to the box.
      outcome = err.code || "error";
      userTurn?.remove();
      reply.turn.remove();
      restoreInput(userText);
      if (err.status === 409) state.blocked = { code: err.code, message: err.message };
      setStatus(err.status === 409 ? "" : err.message, "error");
      setBusy(false); // no run of this tab: what follows is about the chat's own state
    }
  }
  reply.end();
  try {
    // The server's view replaces the provisional bubbles (ids for editing, stopped marks, folded marks).
    if (state.chatId && !connection.down) await openChat(state.chatId);
    if (!connection.down) await Promise.all([loadChats(), loadMemory()]);
  } catch (_) {
    // unreachable: the banner says so, and the page reloads when the server answers
  } finally {
    setBusy(false);
    renderNotice();
    if (state.detail?.running) openChat(state.chatId); // e.g. the broken reply still runs on the server
  }
  return outcome;
}

function setBusy(busy) {
  state.busy = busy;
  tid("send").disabled = busy;
  tid("stop").hidden = !busy;
  document.body.dataset.busy = busy ? "1" : "";
}

async function send(event) {
  event.preventDefault();
  const input = tid("message-input");
  const text = input.value;
  if (!text.trim() || state.busy) return;
  setBusy(true); // before any await: a second Enter must not send twice
  input.value = "";
  try {
    if (!state.chatId) await newChat();
  } catch (err) {
    setBusy(false);
    input.value = text;
    setStatus(err.message, "error");
    return;
  }
  await runTurn("POST", `/chats/${state.chatId}/messages`, { text }, { userText: text });
}

async function stop() {
  if (!state.chatId) return;
  setStatus("Stopping…");
  try {
    const result = await api.call("POST", `/chats/${state.chatId}/stop`);
    setStatus(result.message);
  } catch (err) {
    setStatus(err.message, "error");
  }
  if (!state.busy) await openChat(state.chatId); // stopped in another tab's turn: show what was kept
}

async function regenerate(turn, message) {
  if (state.busy) return;
  // The fork drops this reply and everything after it from the chat's current branch.
  const nodes = [...tid("messages").children];
  nodes.slice(nodes.indexOf(turn)).forEach((n) => n.remove());
  await runTurn("POST", `/chats/${state.chatId}/messages/${message.id}/regenerate`, {}, { userText: null });
}

function startEdit(turn, bubble, message) {
  if (state.busy) return;
  const area = el("textarea", { class: "edit-area", rows: 3, testid: "edit-input" });
  area.value = message.content;
  const save = async () => {
    const text = area.value;
    if (!text.trim()) return;
    // The fork drops this message and everything after it from the chat's current branch.
    const nodes = [...tid("messages").children];
    nodes.slice(nodes.indexOf(turn)).forEach((n) => n.remove());
    await runTurn("PUT", `/chats/${state.chatId}/messages/${message.id}`, { text }, { userText: text });
  };
  bubble.classList.add("editing");
  turn.querySelector(".message-actions").hidden = true;
  bubble.replaceChildren(
    area,
    el(
      "div",
      { class: "edit-actions" },
      el("span", { class: "hint" }, "Regenerates from here; later messages leave the chat."),
      el("button", { type: "button", class: "ghost small", onclick: () => renderChat() }, "Cancel"),
      el("button", { type: "button", class: "primary small", testid: "save-edit", onclick: save }, "Save & regenerate"),
    ),
  );
  area.focus();
}

// ------------------------------------------------------------------ search
let searchTimer = null;

function onSearchInput() {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(runSearch, 250);
}

async function runSearch() {
  const query = tid("chat-search").value.trim();
  const box = tid("search-results");
  if (!query) {
    box.hidden = true;
    box.replaceChildren();
    return;
  }
  let result;
  try {
    result = await api.call("GET", `/chats/search?q=${encodeURIComponent(query)}`);
  } catch (err) {
    box.replaceChildren(el("p", { class: "empty" }, err.message));
    box.hidden = false;
    return;
  }
  if (tid("chat-search").value.trim() !== query) return; // a newer search is under way
  const heading = { one: "Best match", several: "Which one did you mean?", none: "No chat about that." }[result.outcome];
  const items = result.outcome === "one" ? [result.match] : result.candidates;
  box.replaceChildren(el("p", { class: "search-heading", testid: "search-heading" }, heading), ...items.map((h) => chatItem(h.chat, h.score)));
  box.hidden = false;
}

// ------------------------------------------------------------------ memory panel
const PROFILE_FIELDS = ["name", "location", "role", "native_language", "level", "goals"];
const PREFERENCE_FIELDS = ["language", "answer_length", "tone", "code_examples", "prefers_bullets", "other_notes"];
const LIST_FIELDS = new Set(["goals", "other_notes"]);
const BOOL_FIELDS = new Set(["code_examples", "prefers_bullets"]);

function shown(value) {
  if (value === null || value === undefined || (Array.isArray(value) && !value.length)) return "—";
  if (Array.isArray(value)) return value.join(", ");
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value);
}

function parsed(field, raw) {
  const text = raw.trim();
  if (!text || text === "—") return LIST_FIELDS.has(field) ? [] : null;
  if (LIST_FIELDS.has(field)) return text.split(",").map((s) => s.trim()).filter(Boolean);
  if (BOOL_FIELDS.has(field)) {
    if (/^(y|yes|true|1)$/i.test(text)) return true;
    if (/^(n|no|false|0)$/i.test(text)) return false;
    throw new Error(`${label(field)} takes yes or no, not “${text}”. Nothing was changed.`);
  }
  return text;
}

function label(field) {
  return field.replace(/_/g, " ");
}

function inlineEditor(initial, onSave, onCancel) {
  const input = el("input", { type: "text", class: "inline-input", testid: "inline-input" });
  input.value = initial === "—" ? "" : initial;
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") onSave(input.value);
    if (e.key === "Escape") onCancel();
  });
  input.addEventListener("blur", () => onCancel());
  setTimeout(() => input.focus(), 0);
  return input;
}

function renderDocument(testid, values, fields, path) {
  const dl = tid(testid);
  dl.replaceChildren();
  for (const field of fields) {
    const dd = el("dd", { class: values[field] === null || values[field] === undefined || shown(values[field]) === "—" ? "unset" : "", title: "Click to edit" });
    const show = () => dd.replaceChildren(shown(values[field]));
    show();
    dd.addEventListener("click", () => {
      if (dd.querySelector("input")) return;
      dd.replaceChildren(
        inlineEditor(shown(values[field]), async (raw) => {
          try {
            const updated = await api.call("PATCH", path, { [field]: parsed(field, raw) });
            Object.assign(values, updated);
          } catch (err) {
            setStatus(err.message, "error");
          }
          renderDocument(testid, values, fields, path);
        }, show),
      );
    });
    dl.append(el("dt", {}, label(field)), dd);
  }
}

// Where a memory came from: "from your message of 3 May 2026, in 'Moving'", a link to that chat.
function originOf(key) {
  const found = (state.sources || {})[key] || [];
  const source = found[found.length - 1];
  if (!source) return null;
  if (!source.thread_id) return el("span", { class: "origin", testid: "origin" }, source.described);
  return el("a", {
    class: "origin", testid: "origin", href: `#${source.thread_id}`, title: "Open the chat where you said it",
    onclick: async (e) => {
      e.preventDefault();
      await openChat(source.thread_id);
      const said = document.querySelector(`[data-message-id="${CSS.escape(source.message_id || "")}"]`);
      if (said) { said.scrollIntoView({ block: "center" }); said.classList.add("highlight"); }
    },
  }, source.described);
}

function factItem(fact) {
  const text = el("span", { class: "item-text", testid: "fact-text" }, fact.text, originOf(`facts/${fact.id}`));
  const li = el(
    "li",
    { class: "item", testid: "fact", "data-fact-id": fact.id },
    text,
    el("span", { class: `badge ${fact.importance}`, title: "importance" }, fact.importance),
    el("button", {
      type: "button", class: "icon", title: "Edit", testid: "edit-fact",
      onclick: () => text.replaceChildren(inlineEditor(fact.text, async (raw) => {
        if (!raw.trim()) return;
        try { await api.call("PATCH", `/memory/facts/${fact.id}`, { text: raw }); } catch (err) { setStatus(err.message, "error"); }
        await loadMemory();
      }, () => text.replaceChildren(fact.text))),
    }, "✎"),
    el("button", {
      type: "button", class: "icon danger", title: "Forget this fact", testid: "delete-fact",
      onclick: async () => {
        await api.call("DELETE", `/memory/facts/${fact.id}`);
        await loadMemory();
      },
    }, "×"),
  );
  return li;
}

function taskItem(task) {
  const status = el("select", {
    class: "status", testid: "task-status", "aria-label": "Status",
    onchange: async (e) => {
      await api.call("PATCH", `/memory/tasks/${task.id}`, { status: e.target.value });
      await loadMemory();
    },
  }, ...["open", "in_progress", "done"].map((s) => el("option", { value: s, selected: s === task.status }, label(s))));
  return el(
    "li",
    { class: `item task ${task.status}`, testid: "task", "data-task-id": task.id },
    el("span", { class: "item-text" }, task.description, duePhrase(task) ? el("span", { class: "due" }, ` due ${duePhrase(task)}`) : null),
    status,
    el("button", {
      type: "button", class: "icon danger", title: "Delete task", testid: "delete-task",
      onclick: async () => {
        await api.call("DELETE", `/memory/tasks/${task.id}`);
        await loadMemory();
      },
    }, "×"),
  );
}

function renderSummary() {
  const box = tid("summary-board");
  const detail = state.detail;
  if (!detail) {
    box.replaceChildren(el("p", { class: "empty" }, "Open a chat to see its summary."));
    return;
  }
  const board = detail.summary;
  const parts = [];
  if (board.summary) parts.push(el("p", {}, board.summary));
  for (const [name, items] of [
    ["Key facts", board.key_facts], ["Topics", board.topics], ["Entities", board.entities],
    ["Action items", board.action_items], ["Pending questions", board.pending_questions],
  ]) {
    if (items.length) parts.push(el("h4", {}, name), el("ul", {}, ...items.map((i) => el("li", {}, i))));
  }
  if (!parts.length) parts.push(el("p", { class: "empty" }, "No summary yet: the whole chat still fits the model's view."));
  else parts.push(el("p", { class: "hint" }, `${detail.model_view.summary_folds} fold(s); the model sees the summary plus ${detail.model_view.message_ids.length} recent messages.`));
  box.replaceChildren(...parts);
}

async function loadMemory() {
  const [profile, preferences, facts, tasks, sources] = await Promise.all([
    api.call("GET", "/memory/profile"),
    api.call("GET", "/memory/preferences"),
    api.call("GET", "/memory/facts"),
    api.call("GET", "/memory/tasks"),
    api.call("GET", "/memory/sources"),
  ]);
  state.sources = sources;
  renderDocument("profile", profile, PROFILE_FIELDS, "/memory/profile");
  renderDocument("preferences", preferences, PREFERENCE_FIELDS, "/memory/preferences");
  tid("facts").replaceChildren(...(facts.facts.length ? facts.facts.map(factItem) : [el("li", { class: "empty" }, "No facts yet.")]));
  tid("tasks").replaceChildren(...(tasks.tasks.length ? tasks.tasks.map(taskItem) : [el("li", { class: "empty" }, "No tasks.")]));
  renderSummary();
}

async function forgetMe() {
  if (!confirm("Forget everything about you: all chats, all memory, and your API keys? This cannot be undone.")) return;
  const result = await api.call("DELETE", "/me");
  alert(`Forgotten: ${result.deleted.chats} chats, ${result.deleted.memories} memories, ${result.deleted.api_keys} API keys.`);
  state.chatId = null;
  state.detail = null;
  state.notes = {};
  if (state.user?.auth === "on") {
    localStorage.removeItem(KEY_STORAGE);
    api.key = "";
    askForKey("Your key was deleted with everything else.");
    return;
  }
  await loadAll();
}

// ------------------------------------------------------------------ start
async function loadPersonas() {
  state.personas = (await api.call("GET", "/personas")).personas;
  tid("persona-select").replaceChildren(...state.personas.map((p) => el("option", { value: p.name, title: p.description }, p.title)));
}

async function loadAll() {
  document.body.dataset.ready = "";
  await Promise.all([loadPersonas(), loadChats(), loadMemory()]);
  const open = state.chatId || state.chats[0]?.id;
  if (open) await openChat(open);
  else renderChat();
  document.body.dataset.ready = "1"; // for scripts driving the page
}

function wire() {
  tid("new-chat-form").addEventListener("submit", newChat);
  tid("composer").addEventListener("submit", send);
  tid("message-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault();
      tid("composer").requestSubmit();
    }
  });
  tid("stop").addEventListener("click", stop);
  tid("delete-chat").addEventListener("click", deleteChat);
  tid("rename-chat").addEventListener("click", startRename);
  tid("chat-title").addEventListener("dblclick", startRename);
  tid("chat-search").addEventListener("input", onSearchInput);
  tid("refresh-memory").addEventListener("click", loadMemory);
  tid("change-key").addEventListener("click", () => askForKey());
  tid("forget-me").addEventListener("click", forgetMe);
  tid("key-dialog").querySelector("form").addEventListener("submit", saveKey);
  tid("retry-connection").addEventListener("click", () => connection.probe());
  tid("toggle-memory").addEventListener("click", () => setMemoryOpen(document.body.dataset.memory !== "open"));
  tid("close-memory").addEventListener("click", () => setMemoryOpen(false));
  tid("open-chats").addEventListener("click", () => setChatsOpen(document.body.dataset.chats !== "open"));
  tid("close-chats").addEventListener("click", () => setChatsOpen(false));
  tid("scrim").addEventListener("click", closeDrawers);
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && !tid("key-dialog").open) closeDrawers();
  });
  // Crossing a breakpoint: each layout starts from its own default.
  wideScreen.addEventListener("change", () => setMemoryOpen(wideScreen.matches));
  phoneScreen.addEventListener("change", () => setChatsOpen(false));
  setMemoryOpen(wideScreen.matches);
  setChatsOpen(false);
}

// Who is this, then everything; again after the server was unreachable.
async function start() {
  if (!(await whoAmI())) {
    askForKey(api.key ? "The saved key no longer works." : "");
    return;
  }
  await loadAll();
}

async function boot() {
  setUpMarkdown();
  wire();
  takeKeyFromHash();
  renderChat();
  renderSummary();
  await start();
}

boot().catch((err) => setStatus(err.code === "unreachable" ? err.message : `Could not start: ${err.message}`, "error"));
