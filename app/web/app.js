// memory-agent web page: chats, streaming replies, stop, edit, and what the agent remembers.
// Plain JavaScript against the JSON API of the same server; no build step.
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

  async call(method, path, body) {
    const res = await fetch(path, {
      method,
      headers: this.headers(body !== undefined),
      body: body !== undefined ? JSON.stringify(body) : undefined,
    });
    if (!res.ok) throw await this.failure(res);
    return res.status === 204 ? null : res.json();
  },

  // POST/PUT whose reply is Server-Sent Events; onEvent(name, data) for each event.
  async stream(method, path, body, onEvent) {
    const res = await fetch(path, { method, headers: this.headers(true), body: JSON.stringify(body) });
    if (!res.ok) throw await this.failure(res);
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const event = parseEvent(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
        if (event) onEvent(event.name, event.data);
      }
    }
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

// ------------------------------------------------------------------ state
const state = {
  user: null,
  personas: [],
  chats: [],
  chatId: null,
  detail: null,
  busy: false,
  notes: {}, // AI message id → lines such as "Remembered: …"
  lastText: "",
};

// ------------------------------------------------------------------ small formatting helpers
function ago(iso) {
  const seconds = (Date.now() - new Date(iso).getTime()) / 1000;
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
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

function describeInterrupt(value) {
  if (value && value.type === "task_change") {
    const verb = { add: "add a task", update: "update a task", complete: "mark a task done" }[value.action] || value.action;
    return `The agent wants to ${verb}: “${value.description}”${value.due ? ` (due ${value.due})` : ""}.`;
  }
  return `The agent asks for a confirmation: ${JSON.stringify(value)}`;
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
  if (await whoAmI()) {
    localStorage.setItem(KEY_STORAGE, api.key);
    tid("key-dialog").close();
    tid("key-input").value = "";
    await loadAll();
  } else {
    askForKey("That key is unknown or revoked.");
  }
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
      onclick: () => openChat(chat.id),
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
  state.chatId = chatId;
  try {
    state.detail = await api.call("GET", `/chats/${chatId}`);
  } catch (err) {
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
  if (state.detail.running && !state.busy) setTimeout(() => state.chatId === chatId && openChat(chatId), 1500);
}

async function newChat(event) {
  event?.preventDefault();
  const persona = tid("persona-select").value || "assistant";
  const detail = await api.call("POST", "/chats", { persona });
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
  renderChat();
  renderSummary();
  await loadChats();
}

// ------------------------------------------------------------------ the open chat
function messageNode(message) {
  if (message.role === "tool") {
    return el("div", { class: "note tool", testid: "tool-note" }, `${message.tool_name || "tool"} → ${message.content}`);
  }
  if (message.role === "assistant" && message.tool_calls.length && !message.content) {
    const calls = message.tool_calls.map((c) => `${c.name}(${JSON.stringify(c.args)})`).join(", ");
    return el("div", { class: "note tool" }, `calls ${calls}`);
  }
  const isUser = message.role === "user";
  const bubble = el(
    "article",
    {
      class: `message ${isUser ? "user" : "assistant"}${message.in_model_view ? "" : " folded"}`,
      testid: isUser ? "user-message" : "assistant-message",
      "data-message-id": message.id,
    },
    el("div", { class: "message-body" }, message.content),
  );
  const footer = el("div", { class: "message-footer" });
  if (!message.in_model_view) footer.append(el("span", { class: "tag", title: "Folded into the summary the model sees" }, "in summary"));
  if (isUser) {
    bubble.append(el("button", { type: "button", class: "edit-link", testid: "edit-message", title: "Edit and regenerate", onclick: () => startEdit(bubble, message) }, "✎ Edit"));
  }
  for (const line of state.notes[message.id] || []) footer.append(el("span", { class: "memory-note", testid: "memory-note" }, line));
  if (footer.childNodes.length) bubble.append(footer);
  return bubble;
}

function renderChat() {
  const box = tid("messages");
  const detail = state.detail;
  tid("delete-chat").hidden = !detail;
  if (!detail) {
    tid("chat-title").textContent = "No chat open";
    tid("chat-meta").textContent = "Start a new chat, or pick one on the left.";
    box.replaceChildren(el("div", { class: "placeholder" }, "Say something: the agent remembers what matters about you across chats."));
    return;
  }
  const persona = state.personas.find((p) => p.name === detail.chat.persona);
  tid("chat-title").textContent = detail.chat.title;
  const folds = detail.model_view.summary_folds;
  tid("chat-meta").textContent =
    `${persona ? persona.title : detail.chat.persona} · ${detail.messages.length} messages` +
    (folds ? ` · ${detail.messages.filter((m) => !m.in_model_view).length} folded into the summary` : "");
  const nodes = detail.messages.map(messageNode);
  const firstSeen = detail.messages.findIndex((m) => m.in_model_view);
  if (firstSeen > 0) {
    // Where the model's view begins: above it, the model sees only the summary.
    nodes.splice(firstSeen, 0, el("div", { class: "fold-line", testid: "fold-line" }, "above: folded into the summary · below: what the model sees"));
  }
  if (!nodes.length) nodes.push(el("div", { class: "placeholder" }, "No messages yet."));
  box.replaceChildren(...nodes);
  for (const pending of detail.pending_interrupts) box.append(interruptCard(pending));
  if (detail.running && !state.busy) setStatus("A reply is being written…");
  scrollToEnd();
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

// A streamed turn: a user bubble (unless resuming), a reply bubble filled token by token.
async function runTurn(method, path, body, { userText }) {
  const box = tid("messages");
  box.querySelector(".placeholder")?.remove();
  const userNode = userText === null ? null : el("article", { class: "message user pending", testid: "user-message" }, el("div", { class: "message-body" }, userText));
  const replyBody = el("div", { class: "message-body" });
  const replyNode = el("article", { class: "message assistant streaming", testid: "assistant-message" }, replyBody);
  if (userNode) box.append(userNode);
  box.append(replyNode);
  scrollToEnd();
  setBusy(true);
  setStatus("Writing…");
  const notes = [];
  let outcome = "error";
  try {
    await api.stream(method, path, body, (name, data) => {
      if (name === "token") {
        replyBody.textContent += data.text;
        scrollToEnd();
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
        if (data.code === "stopped") {
          setStatus("Stopped: the reply was discarded. Your message is back in the box.");
          if (data.text) tid("message-input").value = data.text;
        } else {
          setStatus(data.message, "error");
        }
      }
    });
  } catch (err) {
    setStatus(err.message, "error");
    if (userText) tid("message-input").value = userText;
  }
  try {
    // The server's view replaces the provisional bubbles (ids for editing, folded marks).
    if (state.chatId) await openChat(state.chatId);
    await Promise.all([loadChats(), loadMemory()]);
  } finally {
    setBusy(false);
  }
  return outcome;
}

function setBusy(busy) {
  state.busy = busy;
  tid("send").disabled = busy;
  tid("stop").hidden = !busy;
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
    if (!result.stopped) setStatus(result.message);
  } catch (err) {
    setStatus(err.message, "error");
  }
}

function startEdit(bubble, message) {
  if (state.busy) return;
  const area = el("textarea", { class: "edit-area", rows: 3, testid: "edit-input" });
  area.value = message.content;
  const save = async () => {
    const text = area.value;
    if (!text.trim()) return;
    // The fork drops this message and everything after it from the chat's current branch.
    const nodes = [...tid("messages").children];
    nodes.slice(nodes.indexOf(bubble)).forEach((n) => n.remove());
    await runTurn("PUT", `/chats/${state.chatId}/messages/${message.id}`, { text }, { userText: text });
  };
  bubble.classList.add("editing");
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
  if (BOOL_FIELDS.has(field)) return /^(y|yes|true|1)$/i.test(text);
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

function factItem(fact) {
  const text = el("span", { class: "item-text", testid: "fact-text" }, fact.text);
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
    el("span", { class: "item-text" }, task.description, task.due ? el("span", { class: "due" }, ` due ${task.due}`) : null),
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
  const [profile, preferences, facts, tasks] = await Promise.all([
    api.call("GET", "/memory/profile"),
    api.call("GET", "/memory/preferences"),
    api.call("GET", "/memory/facts"),
    api.call("GET", "/memory/tasks"),
  ]);
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
  if (state.chats.length && !state.chatId) await openChat(state.chats[0].id);
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
  tid("chat-search").addEventListener("input", onSearchInput);
  tid("refresh-memory").addEventListener("click", loadMemory);
  tid("change-key").addEventListener("click", () => askForKey());
  tid("forget-me").addEventListener("click", forgetMe);
  tid("key-dialog").querySelector("form").addEventListener("submit", saveKey);
}

async function boot() {
  wire();
  takeKeyFromHash();
  renderChat();
  renderSummary();
  if (!(await whoAmI())) {
    askForKey(api.key ? "The saved key no longer works." : "");
    return;
  }
  await loadAll();
}

boot().catch((err) => setStatus(`Could not start: ${err.message}`, "error"));
