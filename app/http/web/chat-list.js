// memory-agent web page: the list of chats (load, open, new, delete, rename).
// Plain JavaScript, no build step; the page's scripts share one global scope and load in order
// (index.html): api.js, markdown.js, chat-list.js, memory-panel.js, app.js.
"use strict";

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
    el("span", { class: "chat-item-title" }, el("span", { class: "title-text", dir: "auto" }, chat.title), score !== undefined ? el("span", { class: "score" }, score.toFixed(2)) : null),
    chat.summary_snippet ? el("span", { class: "chat-item-snippet", dir: "auto" }, chat.summary_snippet.replace(/^Recently: /, "")) : null,
    el("span", { class: "chat-item-meta" }, meta),
  );
}

function renderChatList() {
  const nav = tid("chat-list");
  nav.replaceChildren(...(state.chats.length ? state.chats.map((c) => chatItem(c)) : [el("p", { class: "empty" }, "No chats yet.")]));
}

async function openChat(chatId) {
  clearTimeout(state.pollTimer);
  if (chatId !== state.chatId) state.blocked = state.editing = null;
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
  // No maxlength: it would cut a pasted title silently (and counts UTF-16 units: 100 emoji are
  // 200); the server says what is too long, and the title stays here to be shortened.
  const input = el("input", { type: "text", class: "title-input", testid: "title-input", "aria-label": "Chat title", dir: "auto" });
  input.value = state.detail.chat.title;
  let finished = false;
  const finish = async (save, blurred = false) => {
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
        if (err.status === 422 && !blurred) {
          finished = false; // refused as typed (too long): left open to be shortened; Escape drops it
          return;
        }
      }
    }
    input.remove();
    title.hidden = false;
    renderChatHeader();
  };
  input.addEventListener("keydown", (e) => {
    if (composing(e)) return;
    if (e.key === "Enter") finish(true);
    if (e.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true, true));
  title.hidden = true;
  tid("rename-chat").hidden = true;
  title.after(input);
  input.focus();
  input.select();
}
