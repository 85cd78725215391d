// memory-agent web page: the open chat (streaming replies, stop, regenerate, edit), search, and
// the start. Plain JavaScript against the JSON API of the same server; no build step. The page's
// scripts share one global scope and load in order (index.html): api.js, markdown.js,
// chat-list.js, memory-panel.js, app.js; marked and DOMPurify are vendored (app/http/web/vendor/).
"use strict";

// ------------------------------------------------------------------ state
const state = {
  user: null,
  personas: [],
  chats: [],
  chatId: null,
  detail: null,
  busy: false,
  blocked: null, // why the last message was not sent (409), shown until the next send
  editing: null, // {id, text}: the user message being edited, reopened by every render of the chat
  notes: {}, // AI message id → lines such as "Remembered: …"
  pollTimer: null,
  linkedChat: null, // the chat a link (#<chat id>) asks to open first
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
// The key a link brings (#key=…, as `serve` prints it), out of the address bar at once:
// {key}, or {problem} for a mangled link (a bad % escape); null when the link has none.
function takeKeyFromHash() {
  const match = location.hash.match(/key=([^&]*)/);
  if (!match) return null;
  history.replaceState(null, "", location.pathname + location.search);
  let key = "";
  try { key = decodeURIComponent(match[1]).trim(); } catch (_) { /* URIError: a bad % escape */ }
  return key ? { key } : { problem: "The key in the link is malformed (cut short or mangled when copied)" };
}

// A link to one chat (#<chat id>: the memory panel's "where it came from" links, opened in a new
// tab) names the chat to open first; out of the address bar, as a reload opens the newest again.
function takeChatFromHash() {
  const id = location.hash.slice(1);
  if (!id || id.includes("=")) return;
  state.linkedChat = id;
  history.replaceState(null, "", location.pathname + location.search);
}

// A link's key is used only once the server accepts it: a wrong link must not replace a saved key
// that works. Returns why it was not used, or "".
async function tryLinkKey(link) {
  if (!link) return "";
  if (link.problem) return link.problem;
  const saved = api.key;
  api.key = link.key;
  if (await whoAmI()) return ""; // start() saves it
  api.key = saved;
  return "The key in the link is unknown or revoked";
}

// Whether the server takes api.key. Not api.call: a key refused here is the answer asked for,
// not a key lost mid-session (keyRefused).
async function whoAmI() {
  const res = await api.send("/me", { headers: api.headers() });
  if (res.status === 401) return false;
  if (!res.ok) throw await api.failure(res);
  state.user = await res.json();
  tid("user-badge").textContent = state.user.user_id;
  return true;
}

// Any other request refused for its key (revoked, or deleted with Forget me in another tab):
// the key dialog, as at the start, not only an error in the status line.
function keyRefused(message) {
  askForKey(`${message} Enter a key that works.`);
}

function askForKey(message = "") {
  tid("key-error").textContent = message;
  const dialog = tid("key-dialog");
  if (!dialog.open) dialog.showModal();
  tid("key-input").focus();
}

async function saveKey(event) {
  event.preventDefault();
  const before = state.user?.user_id;
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
  if (before && before !== state.user.user_id) {
    // Another user's key: nothing of the previous user's stays open.
    state.chatId = state.detail = state.blocked = state.editing = null;
    state.notes = {};
  }
  await loadAll();
}

// ------------------------------------------------------------------ the open chat
function tag(text, kind, title, testid) {
  return el("span", { class: `tag ${kind}`, title, testid }, text);
}

function messageNode(message, lastReplyId) {
  if (message.role === "tool") {
    return el("div", { class: "note tool", testid: "tool-note", dir: "auto" }, `${message.tool_name || "tool"} → ${message.content}`);
  }
  if (message.role === "assistant" && message.tool_calls.length && !message.content) {
    const calls = message.tool_calls.map((c) => `${c.name}(${JSON.stringify(c.args)})`).join(", ");
    return el("div", { class: "note tool" }, `calls ${calls}`);
  }
  const isUser = message.role === "user";
  const body = el("div", { class: "message-body", dir: "auto" }); // Hebrew, Arabic: right to left
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
    actions.append(el("button", { type: "button", testid: "edit-message", title: "Edit and regenerate from here", onclick: () => state.busy || startEdit(turn, bubble, message) }, "✎ Edit"));
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
  const edited = state.editing && detail.messages.find((m) => m.id === state.editing.id && m.role === "user");
  const editedBubble = edited && box.querySelector(`[data-message-id="${CSS.escape(edited.id)}"]`);
  // Focused unless the focus is elsewhere (the message box): an editor the render removed had it.
  if (editedBubble) startEdit(editedBubble.closest(".turn"), editedBubble, edited, state.editing.text, document.activeElement === document.body);
  scrollToEnd();
}

// What this tab should know about the chat beyond its messages: a reply written elsewhere,
// or why its own message was not sent. It stays until it no longer holds.
function renderNotice() {
  const notice = tid("chat-notice");
  const running = Boolean(state.detail?.running) && !state.busy;
  document.body.dataset.running = running ? "1" : "";
  const parts = [];
  const blocked = state.blocked;
  const kept = blocked?.answer ? "Your answer was not sent." : blocked?.edit ? "Your edit is still open." : "Your message is still in the box.";
  if (blocked?.code === "no_pending_confirmation") {
    // Approve or Decline on a card another tab (or window) had answered: the chat is reloaded.
    parts.push(el("strong", {}, "Not sent: "), "that confirmation was already answered, probably in another tab or window. The chat shows what came of it.");
  } else if (blocked?.code === "reply_in_progress") {
    parts.push(
      el("strong", {}, "Not sent: "),
      `a reply is already being written on this chat, probably in another tab or window. ${kept} `,
      running ? "This tab shows that reply when it is done."
        : blocked.answer ? "That reply is done now: answer the confirmation again if it is still asked."
        : `That reply is done now: press ${blocked.edit ? "Save & regenerate" : "Send"}.`,
    );
  } else if (state.blocked?.code === "confirmation_pending") {
    // The API's wording names its endpoint; here the answer is a button.
    parts.push(el("strong", {}, "Not sent: "), `the agent is waiting for your answer to the confirmation above: Approve or Decline it first. ${kept}`);
  } else if (state.blocked) {
    parts.push(el("strong", {}, "Not sent: "), state.blocked.message, ` ${kept}`);
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
    await runTurn("POST", `/chats/${state.chatId}/resume`, { approved, interrupt_id: pending.id }, { userText: null, answer: true });
  };
  const card = el(
    "div",
    { class: "interrupt", testid: "interrupt" },
    el("p", { dir: "auto" }, describeInterrupt(pending.value)),
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
  const body = el("div", { class: "message-body", dir: "auto" });
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
    replace(withdrawn, text) {
      // The reply kept is not the one streamed: its text in place of what was shown of the other.
      if (withdrawn && this.text.endsWith(withdrawn)) this.text = this.text.slice(0, this.text.length - withdrawn.length);
      this.add(text);
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
// giveBack(text): where a message that was not sent (or was discarded) goes back to; an edit's to its editor.
// answer: the turn answers a confirmation (Approve, Decline).
async function runTurn(method, path, body, { userText, giveBack = restoreInput, answer = false }) {
  const box = tid("messages");
  box.querySelector(".placeholder")?.remove();
  clearTimeout(state.pollTimer);
  state.blocked = null;
  renderNotice();
  const userTurn = userText === null
    ? null
    : el("div", { class: "turn user" }, el("article", { class: "message user pending", testid: "user-message" }, el("div", { class: "message-body", dir: "auto" }, userText)));
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
      } else if (name === "replaced") {
        reply.replace(data.withdrawn, data.text);
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
        if (data.text) giveBack(data.text); // a discarded message comes back
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
      if (userText) giveBack(userText);
      if (err.status === 409) state.blocked = { code: err.code, message: err.message, edit: giveBack !== restoreInput, answer };
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
  // (Its message stays in the chat whatever happens: nothing to give back to the box.)
  await runTurn("POST", `/chats/${state.chatId}/messages/${message.id}/regenerate`, {}, { userText: null });
}

// The edit lives in state.editing, not only in the DOM: a render of the chat (another tab's reply
// being polled, the end of a turn) reopens it with what was typed, and an edit that was not sent
// comes back to its editor, not to the message box, where Send would add it as a new message.
function startEdit(turn, bubble, message, text = message.content, focus = true) {
  state.editing = { id: message.id, text };
  const area = el("textarea", { class: "edit-area", rows: 3, testid: "edit-input", dir: "auto" });
  area.value = text;
  area.addEventListener("input", () => { if (state.editing?.id === message.id) state.editing.text = area.value; });
  const save = async () => {
    const text = area.value;
    if (!text.trim() || state.busy) return;
    state.editing = null;
    // The fork drops this message and everything after it from the chat's current branch.
    const nodes = [...tid("messages").children];
    nodes.slice(nodes.indexOf(turn)).forEach((n) => n.remove());
    await runTurn("PUT", `/chats/${state.chatId}/messages/${message.id}`, { text }, {
      userText: text,
      giveBack: (back) => { state.editing = { id: message.id, text: back }; },
    });
  };
  bubble.classList.add("editing");
  turn.querySelector(".message-actions").hidden = true;
  bubble.replaceChildren(
    area,
    el(
      "div",
      { class: "edit-actions" },
      el("span", { class: "hint" }, "Regenerates from here; later messages leave the chat."),
      el("button", { type: "button", class: "ghost small", onclick: () => { state.editing = null; renderChat(); } }, "Cancel"),
      el("button", { type: "button", class: "primary small", testid: "save-edit", onclick: save }, "Save & regenerate"),
    ),
  );
  if (focus) area.focus();
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

// ------------------------------------------------------------------ start
async function loadPersonas() {
  state.personas = (await api.call("GET", "/personas")).personas;
  tid("persona-select").replaceChildren(...state.personas.map((p) => el("option", { value: p.name, title: p.description }, p.title)));
}

async function loadAll() {
  document.body.dataset.ready = "";
  await Promise.all([loadPersonas(), loadChats(), loadMemory()]);
  const linked = state.linkedChat;
  state.linkedChat = null;
  // Only one of the user's own chats (the list is all of them).
  const mine = linked && state.chats.some((c) => c.id === linked) ? linked : null;
  if (linked && !mine) setStatus("The chat in the link is not one of yours, or no longer exists.", "error");
  const open = mine || state.chatId || state.chats[0]?.id;
  if (open) await openChat(open);
  else renderChat();
  document.body.dataset.ready = "1"; // for scripts driving the page
}

function wire() {
  tid("new-chat-form").addEventListener("submit", (e) => newChat(e).catch((err) => setStatus(err.message, "error")));
  tid("composer").addEventListener("submit", send);
  tid("message-input").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !composing(e)) {
      e.preventDefault();
      tid("composer").requestSubmit();
    }
  });
  tid("stop").addEventListener("click", stop);
  tid("delete-chat").addEventListener("click", deleteChat);
  tid("rename-chat").addEventListener("click", startRename);
  tid("chat-title").addEventListener("dblclick", startRename);
  tid("chat-search").addEventListener("input", onSearchInput);
  tid("refresh-memory").addEventListener("click", () => loadMemory().catch((err) => setStatus(err.message, "error")));
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
// linkProblem: why the key in the page's link was not used (said with the outcome).
async function start(linkProblem = "") {
  if (!(await whoAmI())) {
    askForKey([linkProblem && `${linkProblem}.`, api.key && "The saved key no longer works."].filter(Boolean).join(" "));
    return;
  }
  if (api.key) localStorage.setItem(KEY_STORAGE, api.key); // the one that works
  await loadAll();
  if (linkProblem) setStatus(`${linkProblem}: the key saved in this browser is used instead.`, "error");
}

async function boot() {
  setUpMarkdown();
  wire();
  const link = takeKeyFromHash();
  takeChatFromHash();
  renderChat();
  renderSummary();
  await start(await tryLinkKey(link));
}

boot().catch((err) => setStatus(err.code === "unreachable" ? err.message : `Could not start: ${err.message}`, "error"));
