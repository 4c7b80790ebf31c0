"""Server-side HTML of the console: the page frame, tables, values and inline-SVG charts.

Everything shown is escaped here (``html.escape``); the page's script (static/console.js)
re-renders the same elements from the JSON endpoints with the same rules, using the
markup's data attributes: ``data-src`` (the endpoint a region polls), ``data-path`` (a
value), ``data-rows`` (a table's rows, its columns described by ``th data-k/data-t``) and
``data-chart`` (series drawn as an SVG chart).
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import quote

NAV = (("/", "Overview"), ("/console/raft", "Raft"), ("/console/topics", "Topics"),
       ("/console/messages", "Messages"), ("/console/groups", "Consumer groups"),
       ("/console/transactions", "Transactions"), ("/console/pipelines", "Pipelines"),
       ("/console/metrics", "Metrics"))
SPARK_W, SPARK_H = 120, 24
#: what stands for no value
DASH = "\u2013"
CHART_W, CHART_H = 640, 160


@dataclass(frozen=True, slots=True)
class Col:
    """A table column: ``kind`` says how a value is shown (text, num, bytes, rate, brate,
    time, bool, live, lag, spark, link, code); ``href`` (link): a path with ``{field}``s."""

    key: str
    label: str
    kind: str = "text"
    href: str = ""


def attr(value: object) -> str:
    return escape(str(value), quote=True)


def fmt_num(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def fmt_bytes(value: Any) -> str:
    if value is None:
        return DASH
    n = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_time(ms: Any) -> str:
    if ms is None or not isinstance(ms, int) or ms < 0:
        return DASH
    try:
        stamp = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return stamp.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}Z"


def fmt_text(value: Any) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def spark(values: Sequence[float], width: int = SPARK_W, height: int = SPARK_H) -> str:
    """A sparkline of ``values`` as an inline SVG polyline."""
    return (f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" role="img">{_line(values, width, height, "s0")}</svg>')


def _line(values: Sequence[float], width: int, height: int, cls: str) -> str:
    if not values:
        return ""
    top = max(max(values), 1e-9)
    step = width / max(1, len(values) - 1)
    pts = " ".join(f"{i * step:.1f},{height - 2 - (v / top) * (height - 4):.1f}"
                   for i, v in enumerate(values))
    return f'<polyline class="{cls}" fill="none" points="{pts}"/>'


def cell(col: Col, row: dict[str, Any]) -> str:
    value = row.get(col.key)
    kind = col.kind
    if kind == "num":
        return f'<td class="n">{fmt_num(value)}</td>'
    if kind == "bytes":
        return f'<td class="n">{fmt_bytes(value)}</td>'
    if kind == "rate":
        return f'<td class="n">{fmt_num(value)}/s</td>'
    if kind == "brate":
        return f'<td class="n">{fmt_bytes(value)}/s</td>'
    if kind == "time":
        return f"<td>{fmt_time(value)}</td>"
    if kind in ("bool", "live"):
        good = bool(value)
        label = ("live" if good else "fenced") if kind == "live" else ("yes" if good else "no")
        return f'<td><span class="badge {"ok" if good else "bad"}">{label}</span></td>'
    if kind == "lag":
        level = row.get("indicator", "ok")
        return (f'<td class="n"><span class="dot {attr(level)}" title="{attr(level)}"></span>'
                f"{fmt_num(value)}</td>")
    if kind == "spark":
        return f"<td>{spark(value if isinstance(value, list) else [])}</td>"
    if kind == "link":
        href = col.href
        for key, raw in row.items():
            href = href.replace("{" + key + "}", quote(str(raw), safe=""))
        return f'<td><a href="{attr(href)}">{escape(fmt_text(value))}</a></td>'
    if kind == "code":
        return f'<td><code class="wrap">{escape(fmt_text(value))}</code></td>'
    return f"<td>{escape(fmt_text(value))}</td>"


def table(rows_key: str, cols: Sequence[Col], rows: Iterable[dict[str, Any]],
          empty: str = "nothing here") -> str:
    head = "".join(f'<th data-k="{attr(c.key)}" data-t="{attr(c.kind)}"'
                   + (f' data-href="{attr(c.href)}"' if c.href else "")
                   + f">{escape(c.label)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(cell(c, r) for c in cols) + "</tr>" for r in rows)
    # the wrapper scrolls a table wider than the screen sideways, not the whole page
    return (f'<div class="scroll"><table class="grid" data-rows="{attr(rows_key)}" '
            f'data-empty="{attr(empty)}">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"
            f'<p class="empty" data-empty-for="{attr(rows_key)}"'
            f'{"" if not body else " hidden"}>{escape(empty)}</p>')


def value(path: str, data: dict[str, Any], kind: str = "text") -> str:
    """One live value (``data[path]``, dotted paths allowed)."""
    found: Any = data
    for part in path.split("."):
        found = found.get(part) if isinstance(found, dict) else None
    shown = {"num": fmt_num, "bytes": fmt_bytes, "time": fmt_time}.get(kind, fmt_text)(found)
    return (f'<span class="v" data-path="{attr(path)}" data-t="{attr(kind)}">'
            f"{escape(shown)}</span>")


def chart(title: str, series: Sequence[str], labels: Sequence[str], unit: str,
          data: dict[str, list[float]]) -> str:
    """A line chart of ``data[s]`` for each of ``series``; ``unit``: bytes, or text."""
    lines = "".join(_line(data.get(s, []), CHART_W, CHART_H, f"s{i}")
                    for i, s in enumerate(series))
    peak = max((max(data.get(s) or [0.0]) for s in series), default=0.0)
    legend = "".join(
        f'<span class="key s{i}">{escape(label)}: <b data-latest="{attr(s)}">'
        f"{escape(_fmt_unit((data.get(s) or [0.0])[-1], unit))}</b></span>"
        for i, (s, label) in enumerate(zip(series, labels, strict=True)))
    return (f'<figure class="chart" data-chart="{attr(",".join(series))}" '
            f'data-unit="{attr(unit)}"><figcaption>{escape(title)} <small>(max '
            f'<b class="peak">{escape(_fmt_unit(peak, unit))}</b>, last 2 min)</small>'
            f'</figcaption><svg viewBox="0 0 {CHART_W} {CHART_H}" width="{CHART_W}" '
            f'height="{CHART_H}" role="img">{lines}</svg><div class="legend">{legend}</div>'
            f"</figure>")


def _fmt_unit(v: float, unit: str) -> str:
    if unit == "bytes":
        return fmt_bytes(v) + "/s"
    return f"{v:,.1f} {unit}"


def page(title: str, active: str, body: str, node_label: str) -> str:
    on = ' class="on"'
    nav = "".join(f'<a href="{href}"{on if href == active else ""}>{escape(label)}</a>'
                  for href, label in NAV)
    return (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>{escape(title)} · Eddy console</title>"
        '<link rel="icon" href="data:,">'
        '<link rel="stylesheet" href="/console/static/console.css">'
        '<script src="/console/static/console.js" defer></script></head><body>'
        f'<header><span class="brand">Eddy</span><nav>{nav}</nav>'
        f'<span class="node">{escape(node_label)} <span class="pulse" id="live" '
        'title="live updates">●</span></span></header>'
        # what went wrong with the last refresh (console.js fills it, and hides it again
        # once every refresh works)
        '<div class="problem" id="problem" role="alert" hidden></div>'
        f"<main><h1>{escape(title)}</h1>{body}</main></body></html>")


def region(src: str, inner: str) -> str:
    """A part of the page that the script refreshes from ``src`` every poll."""
    return f'<section class="live" data-src="{attr(src)}">{inner}</section>'
