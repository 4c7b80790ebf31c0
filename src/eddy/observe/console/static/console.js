// Eddy console: refreshes each live region of the page from its JSON endpoint.
// Hand-written, no dependencies. Data only ever goes into the page as text (textContent,
// attributes), never as markup. The rules mirror the server's (html.py).
"use strict";
(function () {
  const POLL_MS = 1500;
  const FIRST_POLL_MS = 300;
  const SVG = "http://www.w3.org/2000/svg";

  function num(v) {
    if (v === null || v === undefined) return "\u2013";
    if (typeof v === "number" && !Number.isInteger(v)) {
      return v.toLocaleString("en-US", {minimumFractionDigits: 1, maximumFractionDigits: 1});
    }
    return Math.trunc(Number(v)).toLocaleString("en-US");
  }
  function bytes(v) {
    if (v === null || v === undefined) return "\u2013";
    let n = Number(v);
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    for (let i = 0; i < units.length; i++) {
      if (Math.abs(n) < 1024 || i === units.length - 1) {
        return i === 0 ? n.toFixed(0) + " B" : n.toFixed(1) + " " + units[i];
      }
      n /= 1024;
    }
    return n.toFixed(1) + " TiB";
  }
  function time(ms) {
    if (typeof ms !== "number" || ms < 0) return "\u2013";
    const d = new Date(ms);
    if (isNaN(d.getTime())) return String(ms);
    return d.toISOString().replace("T", " ").replace(/\.(\d{3})Z$/, ".$1Z");
  }
  function text(v) {
    if (v === null || v === undefined) return "\u2013";
    if (typeof v === "boolean") return v ? "yes" : "no";
    return String(v);
  }
  function fmt(kind, v) {
    if (kind === "num") return num(v);
    if (kind === "bytes") return bytes(v);
    if (kind === "time") return time(v);
    return text(v);
  }
  function el(tag, cls, content) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (content !== undefined) e.textContent = content;
    return e;
  }
  function polyline(values, w, h, cls) {
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("class", cls);
    line.setAttribute("fill", "none");
    if (!values || !values.length) return line;
    const top = Math.max(Math.max.apply(null, values), 1e-9);
    const step = w / Math.max(1, values.length - 1);
    line.setAttribute("points", values.map(function (v, i) {
      return (i * step).toFixed(1) + "," + (h - 2 - (v / top) * (h - 4)).toFixed(1);
    }).join(" "));
    return line;
  }
  function spark(values) {
    const svg = document.createElementNS(SVG, "svg");
    svg.setAttribute("class", "spark");
    svg.setAttribute("viewBox", "0 0 120 24");
    svg.setAttribute("width", "120");
    svg.setAttribute("height", "24");
    svg.setAttribute("role", "img");
    if (values && values.length) svg.appendChild(polyline(values, 120, 24, "s0"));
    return svg;
  }
  function cell(th, row) {
    const kind = th.dataset.t;
    const v = row[th.dataset.k];
    const td = el("td");
    if (kind === "num" || kind === "bytes" || kind === "rate" || kind === "brate" ||
        kind === "lag") td.className = "n";
    if (kind === "num") td.textContent = num(v);
    else if (kind === "bytes") td.textContent = bytes(v);
    else if (kind === "rate") td.textContent = num(v) + "/s";
    else if (kind === "brate") td.textContent = bytes(v) + "/s";
    else if (kind === "time") td.textContent = time(v);
    else if (kind === "bool" || kind === "live") {
      const good = Boolean(v);
      const label = kind === "live" ? (good ? "live" : "fenced") : (good ? "yes" : "no");
      td.appendChild(el("span", "badge " + (good ? "ok" : "bad"), label));
    } else if (kind === "lag") {
      const level = String(row.indicator || "ok");
      const dot = el("span", "dot " + level);
      dot.title = level;
      td.appendChild(dot);
      td.appendChild(document.createTextNode(num(v)));
    } else if (kind === "spark") {
      td.appendChild(spark(Array.isArray(v) ? v : []));
    } else if (kind === "link") {
      let href = th.dataset.href || "";
      Object.keys(row).forEach(function (k) {
        href = href.split("{" + k + "}").join(encodeURIComponent(String(row[k])));
      });
      const a = el("a", "", text(v));
      a.setAttribute("href", href);
      td.appendChild(a);
    } else if (kind === "code") td.appendChild(el("code", "wrap", text(v)));
    else td.textContent = text(v);
    return td;
  }
  function fillTable(table, rows, root) {
    const ths = Array.prototype.slice.call(table.querySelectorAll("thead th"));
    const body = el("tbody");
    (rows || []).forEach(function (row) {
      const tr = el("tr");
      ths.forEach(function (th) { tr.appendChild(cell(th, row)); });
      body.appendChild(tr);
    });
    table.replaceChild(body, table.tBodies[0]);
    const empty = root.querySelector('[data-empty-for="' + table.dataset.rows + '"]');
    if (empty) empty.hidden = Boolean(rows && rows.length);
  }
  function unitText(v, unit) {
    return unit === "bytes" ? bytes(v) + "/s" : num(Number(v)) + " " + unit;
  }
  function fillChart(fig, data) {
    const series = fig.dataset.chart.split(",");
    const unit = fig.dataset.unit;
    const svg = fig.querySelector("svg");
    const w = Number(svg.getAttribute("width"));
    const h = Number(svg.getAttribute("height"));
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    let peak = 0;
    series.forEach(function (s, i) {
      const values = (data.series && data.series[s]) || [];
      svg.appendChild(polyline(values, w, h, "s" + i));
      values.forEach(function (v) { if (v > peak) peak = v; });
      const latest = fig.querySelector('[data-latest="' + s + '"]');
      if (latest) latest.textContent = unitText(values.length ? values[values.length - 1] : 0, unit);
    });
    const peakEl = fig.querySelector(".peak");
    if (peakEl) peakEl.textContent = unitText(peak, unit);
  }
  function lookup(data, path) {
    return path.split(".").reduce(function (o, k) {
      return o !== null && typeof o === "object" ? o[k] : undefined;
    }, data);
  }
  function fill(root, data) {
    root.querySelectorAll("[data-path]").forEach(function (e) {
      e.textContent = fmt(e.dataset.t, lookup(data, e.dataset.path));
    });
    root.querySelectorAll("table[data-rows]").forEach(function (t) {
      fillTable(t, data[t.dataset.rows], root);
    });
    root.querySelectorAll("figure[data-chart]").forEach(function (f) { fillChart(f, data); });
  }
  // Why a refresh failed, as a person reads it: the HTTP status and reason with the
  // message of a JSON error body, or that the node cannot be reached.
  function httpFailure(src, resp) {
    const head = "HTTP " + resp.status + (resp.statusText ? " " + resp.statusText : "") +
      " from " + src;
    return resp.text().then(function (body) {
      let detail = "";
      try {
        const parsed = JSON.parse(body);
        if (parsed && typeof parsed.error === "string") detail = parsed.error;
      } catch (e) {
        detail = body.trim().slice(0, 200);
      }
      throw new Error(detail ? head + ": " + detail : head);
    }, function () { throw new Error(head); });
  }
  function refresh(src, regions) {
    return fetch(src, {headers: {"Accept": "application/json"}, cache: "no-store"})
      .then(function (resp) {
        if (!resp.ok) return httpFailure(src, resp);
        return resp.json().catch(function (e) {
          throw new Error("the answer of " + src + " is not JSON: " + e.message);
        });
      }, function (e) {
        throw new Error("cannot reach the node (" + location.host + "): " + e.message);
      })
      .then(function (data) {
        try {
          regions.forEach(function (r) { fill(r, data); });
        } catch (e) {
          throw new Error("cannot show the answer of " + src + ": " + e.message);
        }
        document.body.dataset.updated = String(Date.now());
        return "";
      })
      .catch(function (e) { return e && e.message ? e.message : String(e); });
  }
  let lastGood = Date.now();
  function report(problems) {
    const box = document.getElementById("problem");
    if (!box) return;
    if (!problems.length) {
      lastGood = Date.now();
      box.hidden = true;
      box.textContent = "";
      return;
    }
    box.textContent = "";
    box.appendChild(el("strong", "", "Live updates failed"));
    box.appendChild(el("span", "since", " (the page shows what the node said at " +
      new Date(lastGood).toLocaleTimeString() + "; still retrying)"));
    problems.forEach(function (p) { box.appendChild(el("div", "reason", p)); });
    box.hidden = false;
  }
  function poll() {
    const regions = document.querySelectorAll("section.live[data-src]");
    const sources = {};
    regions.forEach(function (r) { (sources[r.dataset.src] = sources[r.dataset.src] || []).push(r); });
    const live = document.getElementById("live");
    const jobs = Object.keys(sources).map(function (src) { return refresh(src, sources[src]); });
    Promise.all(jobs).then(function (results) {
      const problems = results.filter(Boolean);
      if (live) live.className = "pulse " + (problems.length ? "off" : "on");
      report(problems);
      setTimeout(poll, POLL_MS);
    });
  }
  // the first refresh soon after the page shows, then one every POLL_MS
  if (document.querySelector("section.live[data-src]")) setTimeout(poll, FIRST_POLL_MS);
})();
