// memory-agent web page: the memory panel (profile, preferences, facts, tasks, summary, forget-me).
// Plain JavaScript, no build step; the page's scripts share one global scope and load in order
// (index.html): api.js, markdown.js, chat-list.js, memory-panel.js, app.js.
"use strict";

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

// A list is edited as "a, b, c": the items it holds are kept whole, commas and all (the goal
// "Run a marathon, then rest" is one item, not two); what else is typed is split at its commas.
function listItems(text, current) {
  const items = [];
  let rest = text.replace(/^[\s,]+/, "");
  while (rest) {
    const whole = current.filter((item) => rest.startsWith(item) && /^\s*(,|$)/.test(rest.slice(item.length)));
    const item = whole.length ? whole.reduce((a, b) => (b.length > a.length ? b : a)) : rest.split(",")[0].trim();
    items.push(item);
    rest = rest.slice(item.length).replace(/^[\s,]+/, "");
  }
  return items;
}

function parsed(field, raw, current) {
  const text = raw.trim();
  if (!text || text === "—") return LIST_FIELDS.has(field) ? [] : null;
  if (LIST_FIELDS.has(field)) return listItems(text, current || []);
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
  const input = el("input", { type: "text", class: "inline-input", testid: "inline-input", dir: "auto" });
  input.value = initial === "—" ? "" : initial;
  input.addEventListener("keydown", (e) => {
    if (composing(e)) return;
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
    const dd = el("dd", { dir: "auto", class: values[field] === null || values[field] === undefined || shown(values[field]) === "—" ? "unset" : "", title: "Click to edit" });
    const show = () => dd.replaceChildren(shown(values[field]));
    show();
    dd.addEventListener("click", () => {
      if (dd.querySelector("input")) return;
      dd.replaceChildren(
        inlineEditor(shown(values[field]), async (raw) => {
          try {
            const updated = await api.call("PATCH", path, { [field]: parsed(field, raw, values[field]) });
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

// A change made in the panel: a refusal (the item is gone: another tab deleted it) or an unreachable
// server is said, and the panel then shows what is stored, not what the click hoped for.
async function changeMemory(change) {
  try {
    await change();
  } catch (err) {
    setStatus(err.message, "error");
  }
  await loadMemory().catch(() => {}); // unreachable: the banner says so, and the page reloads when it answers
}

function factItem(fact) {
  const text = el("span", { class: "item-text", testid: "fact-text", dir: "auto" }, fact.text, originOf(`facts/${fact.id}`));
  const li = el(
    "li",
    { class: "item", testid: "fact", "data-fact-id": fact.id },
    text,
    el("span", { class: `badge ${fact.importance}`, title: "importance" }, fact.importance),
    el("button", {
      type: "button", class: "icon", title: "Edit", testid: "edit-fact",
      onclick: () => text.replaceChildren(inlineEditor(fact.text, async (raw) => {
        if (!raw.trim()) return;
        await changeMemory(() => api.call("PATCH", `/memory/facts/${fact.id}`, { text: raw }));
      }, () => text.replaceChildren(fact.text))),
    }, "✎"),
    el("button", {
      type: "button", class: "icon danger", title: "Forget this fact", testid: "delete-fact",
      onclick: () => changeMemory(() => api.call("DELETE", `/memory/facts/${fact.id}`)),
    }, "×"),
  );
  return li;
}

function taskItem(task) {
  const status = el("select", {
    class: "status", testid: "task-status", "aria-label": "Status",
    onchange: (e) => changeMemory(() => api.call("PATCH", `/memory/tasks/${task.id}`, { status: e.target.value })),
  }, ...["open", "in_progress", "done"].map((s) => el("option", { value: s, selected: s === task.status }, label(s))));
  return el(
    "li",
    { class: `item task ${task.status}`, testid: "task", "data-task-id": task.id },
    el("span", { class: "item-text", dir: "auto" }, task.description, duePhrase(task) ? el("span", { class: "due" }, ` due ${duePhrase(task)}`) : null),
    status,
    el("button", {
      type: "button", class: "icon danger", title: "Delete task", testid: "delete-task",
      onclick: () => changeMemory(() => api.call("DELETE", `/memory/tasks/${task.id}`)),
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
  if (board.summary) parts.push(el("p", { dir: "auto" }, board.summary));
  for (const [name, items] of [
    ["Key facts", board.key_facts], ["Topics", board.topics], ["Entities", board.entities],
    ["Action items", board.action_items], ["Pending questions", board.pending_questions],
  ]) {
    if (items.length) parts.push(el("h4", {}, name), el("ul", {}, ...items.map((i) => el("li", { dir: "auto" }, i))));
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
  let result;
  try {
    result = await api.call("DELETE", "/me");
  } catch (err) {
    setStatus(err.message, "error");
    return;
  }
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
