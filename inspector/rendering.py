"""Safe rendering of model- and extension-produced content for the inspector and the console.

Everything here returns HTML that is safe to put in a page: markdown is rendered without raw
HTML and then cleaned by an allow-list sanitizer (two layers, so a renderer bug alone cannot
inject markup); JSON is pretty-printed and escaped; HTML artifacts are never inlined (the
templates put them in a sandboxed iframe).
"""

from __future__ import annotations

import json
from typing import Any

import nh3
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

from conversations.selectors import entry_text

# raw HTML inside markdown is shown as text, never interpreted; links keep markdown-it's
# own scheme check (no javascript:, vbscript:, file:, data: except images)
_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")
# the tags markdown produces; nothing else survives the sanitizer
_TAGS = {
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "img", "li", "ol", "p", "pre", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
}  # fmt: skip
_ATTRIBUTES = {"a": {"href", "title"}, "img": {"src", "alt", "title"}, "th": {"align"},
               "td": {"align"}}  # fmt: skip
_SCHEMES = {"http", "https", "mailto"}
# bounds: a huge artifact is cut for display (the full payload stays in the store)
MAX_RENDER_CHARS = 200_000


def markdown_html(text: str) -> SafeString:
    """Markdown → sanitized HTML (links open outside the page, without referrer)."""
    rendered = _markdown.render(text[:MAX_RENDER_CHARS])
    cleaned = nh3.clean(
        rendered,
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes=_SCHEMES,
        link_rel="noopener noreferrer nofollow",
    )
    return mark_safe(cleaned)  # noqa: S308 (sanitized by nh3 with an allow-list just above)


def json_pretty(value: Any) -> str:
    """Indented JSON text (escaped by the template that shows it)."""
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return text[:MAX_RENDER_CHARS]


def pre(text: str) -> SafeString:
    return mark_safe(f"<pre>{escape(text[:MAX_RENDER_CHARS])}</pre>")  # noqa: S308 (escaped)


def content_text(content: Any) -> str:
    """The text parts of an entry's content (other parts are shown as JSON)."""
    return entry_text(content)


def content_other(content: Any) -> list[str]:
    """Non-text parts of an entry's content, each as indented JSON."""
    if not isinstance(content, list):
        return [json_pretty(content)]
    return [
        json_pretty(part)
        for part in content
        if not (isinstance(part, dict) and part.get("type") == "text")
    ]
