"""The console's pages: each one's body, rendered server-side from the same data its JSON
endpoint serves (the script refreshes the live regions from that endpoint)."""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from eddy.observe.console.html import Col, attr, chart, region, table, value

API = "/console/api"


def _card(label: str, inner: str) -> str:
    return f'<div class="card"><div class="label">{escape(label)}</div>{inner}</div>'


def overview(d: dict[str, Any]) -> str:
    cards = "".join((
        _card("Cluster", value("cluster_id", d)), _card("This node", value("node_id", d)),
        _card("Roles", value("roles", d)), _card("Health", value("health", d)),
        _card("Controller", value("controller_id", d)),
        _card("Live brokers", value("live_brokers", d, "num")),
        _card("Partitions", value("partitions", d, "num")),
        _card("Under-replicated", value("under_replicated", d, "num")),
        _card("Offline", value("offline", d, "num")), _card("Topics", value("topics", d, "num")),
        _card("Groups", value("groups", d, "num")),
    ))
    brokers = table("brokers", (
        Col("node_id", "Node", "num"), Col("roles", "Roles"), Col("rack", "Rack"),
        Col("kafka_addr", "Kafka address"),
        Col("live", "Liveness", "live"), Col("epoch", "Epoch", "num"),
        Col("heartbeat_age_s", "Last heartbeat (s ago)", "num"),
        Col("this_node", "This node", "bool")), d["brokers"])
    checks = table("checks", (Col("check", "Check"), Col("ok", "Passes", "bool"),
                              Col("detail", "Detail")), d["checks"])
    body = (f'<div class="cards">{cards}</div><h2>Brokers</h2>{brokers}'
            f"<h2>Readiness</h2>{checks}")
    return region(f"{API}/overview", body)


def raft(d: dict[str, Any]) -> str:
    if not d["clustered"]:
        return ('<p class="note">This node runs outside a cluster: its metadata is not in '
                "Raft, so it has no Raft groups.</p>")
    groups = table("groups", (
        Col("group", "Group"), Col("role", "Role here"), Col("leader", "Leader", "num"),
        Col("term", "Term", "num"), Col("commit_index", "Commit index", "num"),
        Col("applied_index", "Applied index", "num"), Col("apply_lag", "Apply lag", "num"),
        Col("voters", "Voters"), Col("learners", "Learners")), d["groups"])
    voters = table("voters", (
        Col("group", "Group"), Col("node_id", "Node", "num"), Col("kind", "Kind"),
        Col("lag", "Lag (entries, as the leader sees it)", "num")), d["voters"],
        "no members known")
    note = ('<p class="note">Follower lag is known on a group\'s leader only: on a '
            "follower it shows a dash.</p>")
    return region(f"{API}/raft", f"<h2>Groups</h2>{groups}<h2>Members</h2>{voters}{note}")


def topics(d: dict[str, Any]) -> str:
    rows = table("topics", (
        Col("name", "Topic", "link", "/console/topics/{name}"),
        Col("internal", "Internal", "bool"), Col("partitions", "Partitions", "num"),
        Col("replication_factor", "Replicas", "num"),
        Col("local_partitions", "Held here", "num"), Col("messages", "Messages", "num"),
        Col("bytes", "Size", "bytes"), Col("rate_records", "Produce rate", "rate"),
        Col("rate_bytes", "Produce bytes", "brate")), d["topics"], "no topics yet")
    return region(f"{API}/topics", f'<p>{value("count", d, "num")} topic(s); messages = '
                                   f"high watermark minus log start, of the partitions held "
                                   f"here.</p>{rows}")


def topic(d: dict[str, Any]) -> str:
    name = d["name"]
    head = (f'<div class="cards">{_card("Topic id", value("topic_id", d))}'
            f'{_card("Partitions", value("partition_count", d, "num"))}'
            f'{_card("Messages (held here)", value("messages", d, "num"))}'
            f'{_card("Size (held here)", value("bytes", d, "bytes"))}</div>')
    parts = table("partitions", (
        Col("partition", "Partition", "num"), Col("leader", "Leader", "num"),
        Col("leader_epoch", "Leader epoch", "num"), Col("replicas", "Replicas"),
        Col("isr", "ISR"), Col("log_start_offset", "Log start", "num"),
        Col("high_watermark", "High watermark", "num"),
        Col("log_end_offset", "Log end", "num"), Col("messages", "Messages", "num"),
        Col("bytes", "Size", "bytes"), Col("segments", "Segments", "num"),
        Col("browse", "Browse", "link", "/console/messages?topic={topic}&partition={partition}")),
        d["partitions"])
    configs = table("configs", (Col("name", "Config"), Col("value", "Value", "code"),
                                Col("source", "Source")), d["configs"])
    return region(f"{API}/topics/{quote(name, safe='')}",
                  f"{head}<h2>Partitions</h2>{parts}<h2>Configs</h2>{configs}")


MESSAGE_COLS = (
    Col("offset", "Offset", "num"), Col("timestamp", "Timestamp", "time"),
    Col("key", "Key", "code"), Col("value", "Value", "code"),
    Col("value_format", "Format"), Col("value_size", "Bytes", "num"),
    Col("headers", "Headers", "code"), Col("note", "Note"))


def messages_form(query: dict[str, str], topic_names: list[str]) -> str:
    def field(name: str, label: str, kind: str = "text") -> str:
        return (f'<label>{escape(label)} <input name="{name}" type="{kind}" '
                f'value="{attr(query.get(name, ""))}"'
                + (' list="topic-names"' if name == "topic" else "") + "></label>")

    options = "".join(f'<option value="{attr(n)}">' for n in topic_names[:1000])
    return (f'<form class="query" method="get" action="/console/messages">'
            f'{field("topic", "Topic")}{field("partition", "Partition", "number")}'
            f'{field("offset", "From offset", "number")}'
            f'{field("timestamp", "or from timestamp (ms)", "number")}'
            f'{field("limit", "Records (≤ 100)", "number")}<button>Show</button>'
            f'<datalist id="topic-names">{options}</datalist></form>')


def messages(query: dict[str, str], topic_names: list[str], d: dict[str, Any] | None,
             error: str = "") -> str:
    form = messages_form(query, topic_names)
    if error:
        return f'{form}<p class="error">{escape(error)}</p>'
    if d is None:
        return (f'{form}<p class="note">Pick a topic and a partition: without an offset or a '
                "timestamp the last records are shown, and new ones appear as they come.</p>")
    src = f"{API}/messages?" + urlencode({k: v for k, v in query.items() if v})
    summary = (f'<p>{escape(d["topic"])}-{d["partition"]}: log start '
               f'{value("log_start_offset", d, "num")}, high watermark '
               f'{value("high_watermark", d, "num")}; shown from offset '
               f'{value("from_offset", d, "num")}, next {value("next_offset", d, "num")}.</p>')
    notes = "".join(f'<p class="note">{escape(n)}</p>' for n in d.get("notes", []))
    rows = table("records", MESSAGE_COLS, d["records"], "no records there")
    return form + region(src, summary + rows) + notes


def groups(d: dict[str, Any]) -> str:
    if not d["serving"]:
        return region(f"{API}/groups", f'<p class="note">{escape(d["message"])}</p>')
    groups_t = table("groups", (
        Col("group", "Group"), Col("state", "State"), Col("protocol", "Assignor"),
        Col("generation", "Generation", "num"), Col("members", "Members", "num"),
        Col("lag", "Total lag", "lag"), Col("lag_history", "Lag, last 2 min", "spark")),
        d["groups"], "no consumer groups yet")
    parts = table("partitions", (
        Col("group", "Group"), Col("topic", "Topic"), Col("partition", "Partition", "num"),
        Col("committed", "Committed", "num"), Col("high_watermark", "High watermark", "num"),
        Col("lag", "Lag", "lag"), Col("owner", "Consumer")), d["partitions"],
        "no committed offsets")
    members = table("members", (
        Col("group", "Group"), Col("client_id", "Client id"), Col("host", "Host"),
        Col("member_id", "Member id", "code"), Col("assignment", "Assignment")),
        d["members"], "no members")
    legend = ('<p class="note"><span class="dot ok"></span>caught up '
              '<span class="dot behind"></span>behind '
              '<span class="dot far"></span>1,000 records or more behind</p>')
    return region(f"{API}/groups", f"{legend}<h2>Groups</h2>{groups_t}<h2>Lag per partition"
                                   f"</h2>{parts}<h2>Members</h2>{members}")


def transactions(d: dict[str, Any]) -> str:
    cards = "".join((
        _card("Transactional ids", value("count", d, "num")),
        _card("Ongoing", value("ongoing", d, "num")),
        _card("Committed (since start)", value("committed", d, "num")),
        _card("Aborted (since start)", value("aborted", d, "num"))))
    note = "" if d["serving"] else (
        '<p class="note">This node does not coordinate transactions now: the ids below are '
        "what it last knew.</p>")
    states = table("states", (Col("state", "State"), Col("count", "Ids", "num")),
                   d["states"], "no transactional ids")
    txns = table("transactions", (
        Col("transactional_id", "Transactional id"), Col("state", "State"),
        Col("producer_id", "Producer id", "num"), Col("producer_epoch", "Epoch", "num"),
        Col("partition_count", "Partitions", "num"), Col("partitions", "In the transaction"),
        Col("age_s", "Open for (s)", "num"), Col("timeout_ms", "Timeout (ms)", "num")),
        d["transactions"], "no transactional ids")
    return region(f"{API}/transactions", f'<div class="cards">{cards}</div>{note}'
                                         f"<h2>States</h2>{states}<h2>Ids</h2>{txns}")


def pipelines(d: dict[str, Any]) -> str:
    body = (f'<p class="note">{escape(d["message"])}</p>'
            f'<div class="cards">{_card("Running", value("reporting", d, "num"))}</div>'
            + table("reports", (
                Col("name", "Pipeline"), Col("state", "State"), Col("up", "Up", "bool"),
                Col("rows_per_s", "Rate", "rate"), Col("rows_total", "Rows read", "num"),
                Col("lag", "Lag (records)", "lag"),
                Col("dead_letters", "Dead letters", "num"), Col("batch_id", "Batch", "num"),
                Col("updated", "Last report", "time"), Col("where", "Runs on"),
                Col("error", "Error")),
                d["reports"], "no pipeline has reported here yet"))
    if d["clustered"]:
        body += "<h2>Registered in the cluster</h2>" + table("registered", (
            Col("name", "Pipeline"), Col("version", "Version", "num"),
            Col("spec_bytes", "Spec bytes", "num"), Col("spec", "Spec", "code")),
            d["registered"], "no pipelines registered")
    return region(f"{API}/pipelines", body)


def metrics(d: dict[str, Any]) -> str:
    s = d["series"]
    charts = (
        chart("Throughput", ("bytes_in", "bytes_out"), ("produced", "fetched"), "bytes", s)
        + chart("Records and requests", ("records_in", "requests"),
                ("records produced/s", "requests/s"), "/s", s)
        + chart("Request latency (all but Fetch)", ("latency_avg_ms", "latency_p99_ms"),
                ("average", "p99 (bucket bound)"), "ms", s))
    return region(f"{API}/metrics", f'<p class="note">Sampled every {d["interval_s"]:g} s '
                                     f"from the broker's counters.</p>{charts}")
