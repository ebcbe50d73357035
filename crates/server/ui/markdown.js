// Markdown of model output to HTML: marked for the syntax, raw HTML shown
// as text (a model's output is not trusted markup), links only to http(s)
// and mailto, images shown as links (the page loads nothing remote), code
// blocks highlighted by highlight.js in the languages bundled.
import { marked } from "./vendor/marked.esm.js";
import hljs from "./vendor/highlight.core.min.js";
import languages from "./vendor/highlight.languages.js";

for (const [name, grammar] of Object.entries(languages)) hljs.registerLanguage(name, grammar);

const escapeHtml = (s) =>
  s.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

const safeHref = (href) => (/^(https?:|mailto:)/i.test(href || "") ? href : null);

marked.use({
  gfm: true,
  breaks: false,
  renderer: {
    html(token) {
      return escapeHtml(token.text);
    },
    link(token) {
      const href = safeHref(token.href);
      const text = this.parser.parseInline(token.tokens);
      return href ? `<a href="${escapeHtml(href)}" rel="noopener noreferrer" target="_blank">${text}</a>` : text;
    },
    image(token) {
      const href = safeHref(token.href);
      const alt = escapeHtml(token.text || "image");
      return href ? `<a href="${escapeHtml(href)}" rel="noopener noreferrer" target="_blank">[${alt}]</a>` : alt;
    },
    code(token) {
      const lang = (token.lang || "").split(/\s/)[0].toLowerCase();
      const body = hljs.getLanguage(lang)
        ? hljs.highlight(token.text, { language: lang, ignoreIllegals: true }).value
        : escapeHtml(token.text);
      const cls = lang ? ` class="hljs language-${escapeHtml(lang)}"` : ' class="hljs"';
      return `<pre><code${cls}>${body}</code></pre>\n`;
    },
  },
});

/** HTML for `text` (Markdown), safe to assign to innerHTML. */
export function renderMarkdown(text) {
  return marked.parse(text, { async: false });
}
