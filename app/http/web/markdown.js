// memory-agent web page: Markdown (the vendored marked, then DOMPurify) and copying code.
// Plain JavaScript, no build step; the page's scripts share one global scope and load in order
// (index.html): api.js, markdown.js, chat-list.js, memory-panel.js, app.js.
"use strict";

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
  // Each block takes the direction of its own first letters: a Hebrew paragraph right to left,
  // an English one beside it left to right.
  for (const block of fragment.querySelectorAll("p, li, h1, h2, h3, h4, h5, h6, blockquote, th, td")) block.dir = "auto";
  target.replaceChildren(fragment);
}

function codeBlock(pre) {
  const code = pre.querySelector("code");
  const language = (code?.className.match(/language-([\w+#.-]+)/) || [])[1] || "code";
  const copy = el("button", { type: "button", class: "copy-code", testid: "copy-code", title: "Copy the code" }, "Copy");
  copy.addEventListener("click", () => copyWithFeedback(copy, (code || pre).textContent.replace(/\n$/, ""))); // marked ends code with a newline
  return el("div", { class: "code-block", testid: "code-block", dir: "ltr" }, el("div", { class: "code-head" }, el("span", {}, language), copy), pre.cloneNode(true));
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
