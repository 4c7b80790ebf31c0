"""`eddy connect`: run data pipelines (YAML files) on Apache Spark."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
from typing import Annotated, Any

import typer

from eddy.cli.common import (
    CliError,
    Output,
    OutputOpt,
    handle_errors,
    parse_kv,
    print_json,
    render_table,
    resolve_output,
)

connect_app = typer.Typer(
    help="Data pipelines on Apache Spark: source -> transforms -> sinks, from a YAML file.",
    no_args_is_help=True,
)

FileArg = Annotated[str, typer.Argument(help="the pipeline file (YAML)", metavar="FILE")]


def _load(path: str) -> Any:
    from eddy.connect.runtime.spec import SpecError, load_pipeline

    try:
        return load_pipeline(path)
    except SpecError as exc:
        raise CliError("the pipeline file has problems:\n  " + "\n  ".join(exc.problems)
                       ) from None


@connect_app.command("validate")
@handle_errors
def validate(file: FileArg, output: OutputOpt = None) -> None:
    """Check a pipeline file: every problem with its line and field (no Spark started)."""
    p = _load(file)
    summary = {
        "name": p.name, "source": p.source.type,
        "transforms": [next(iter(type(t).model_fields)) for t in p.transforms],
        "sinks": [k.type for k in p.sinks], "trigger": p.trigger,
        "checkpoint": str(p.checkpoint_dir()),
        "dead_letter": "/".join(p.dead_letter_target() or ()) or None,
    }
    if resolve_output(output) is Output.json:
        print_json(summary)
    else:
        typer.echo(f"{file}: ok: pipeline {p.name}: {p.source.type} -> "
                   f"{len(p.transforms)} transform(s) -> "
                   f"{', '.join(summary['sinks'])}")


@connect_app.command("list-connectors")
@handle_errors
def list_connectors(output: OutputOpt = None) -> None:
    """Sources, transforms and sinks a pipeline can use."""
    from eddy.connect.runtime.inventory import all_connectors

    rows = [{"kind": c.kind, "name": c.name, "description": c.description}
            for c in all_connectors()]
    fmt = resolve_output(output)
    if fmt is Output.json:
        print_json(rows)
    else:
        render_table(fmt, ["kind", "name", "description"],
                     [[r["kind"], r["name"], r["description"]] for r in rows])


@connect_app.command("spec")
@handle_errors
def spec_cmd(name: Annotated[str, typer.Argument(
        help="a connector: eddy, datagen, files, stdout, webhook, a transform, "
             "or KIND/NAME such as sink/files")]) -> None:
    """A connector's configuration as JSON Schema (Airbyte's `spec`)."""
    from eddy.connect.runtime.inventory import all_connectors, find, json_schema

    found = find(name)
    if not found:
        known = sorted({f"{c.kind}/{c.name}" for c in all_connectors()})
        raise CliError(f"no connector {name!r}; known: {', '.join(known)}")
    if len(found) == 1:
        print_json(json_schema(found[0]))
    else:
        print_json({c.kind: json_schema(c) for c in found})


@connect_app.command("check")
@handle_errors
def check_cmd(file: FileArg, output: OutputOpt = None) -> None:
    """Can the pipeline reach its source, sinks, dead-letter topic and checkpoint?"""
    from eddy.connect.runtime.inventory import check

    checks = check(_load(file))
    failed = [c for c in checks if not c.ok]
    fmt = resolve_output(output)
    if fmt is Output.json:
        print_json({"status": "FAILED" if failed else "SUCCEEDED",
                    "checks": [{"what": c.what, "ok": c.ok, "message": c.message}
                               for c in checks]})
    else:
        for c in checks:
            typer.echo(f"{'ok ' if c.ok else 'FAIL'}  {c.what}: {c.message}")
    if failed:
        raise typer.Exit(1)


#: what running a pipeline needs beyond the broker (the `connect` extra)
SPARK_MODULES = ("pyspark", "pyarrow", "pandas")


def _log_setup() -> None:
    """INFO lines on stderr, as text or (EDDY_LOG_FORMAT=json, a node's log.format) JSON."""
    from eddy.telemetry import log_format

    fmt = os.environ.get("EDDY_LOG_FORMAT", "text").strip().lower()
    if fmt not in ("text", "json"):
        raise typer.BadParameter(f"EDDY_LOG_FORMAT must be text or json, not {fmt!r}")
    log_format.configure(logging.INFO, "json" if fmt == "json" else "text")


def _need_spark(command: str) -> None:
    """A clear error when the `connect` extra is not installed (a broker-only install)."""
    missing = [m for m in SPARK_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise CliError(
            f"eddy connect {command} runs pipelines on Apache Spark, and {', '.join(missing)} "
            "is not installed here: add Eddy's connect extra, pip install 'eddy[connect]' "
            "(./scripts/setup installs it), or EXTRAS=connect ./scripts/setup")


def _spark(master: str | None, conf: list[str] | None, pipeline: Any) -> Any:
    from eddy.connect.spark import make_session

    settings = dict(pipeline.spark)
    settings.update(dict(parse_kv(conf, "--conf")))
    return make_session(master, app_name=f"eddy-connect-{pipeline.name}", conf=settings)


MasterOpt = Annotated[str | None, typer.Option(
    "--master", help="Spark master: local[*] (default), local[N], spark://HOST:PORT, yarn...")]
ConfOpt = Annotated[list[str] | None, typer.Option(
    "--conf", metavar="KEY=VALUE", help="a Spark setting (repeatable)")]


@connect_app.command("discover")
@handle_errors
def discover(file: FileArg, master: MasterOpt = None, conf: ConfOpt = None,
             sample: Annotated[int, typer.Option(help="records sampled")] = 100,
             output: OutputOpt = None) -> None:
    """The source's streams and schema, and what parse_json would infer (starts Spark)."""
    _need_spark("discover")
    from eddy.connect.batch import INTERNAL_COLUMNS
    from eddy.connect.runtime import source_frames
    from eddy.connect.transforms.compiler import compile_plan, infer_json_schema

    p = _load(file)
    spark = _spark(master, conf, p)
    df = source_frames.sample(spark, p, sample)
    fields = [f for f in df.schema.fields if f.name not in INTERNAL_COLUMNS]
    result: dict[str, Any] = {
        "source": p.source.type,
        "schema": {f.name: f.dataType.simpleString() for f in fields},
    }
    rows = df.collect()
    result["sampled_records"] = len(rows)
    if "topic" in df.columns:
        result["streams"] = sorted({f"{r['topic']}/{r['partition']}" for r in rows})
    for i, t in enumerate(p.transforms):
        kind = next(iter(type(t).model_fields))
        if kind == "parse_json":
            before, _ = compile_plan(p.transforms[:i], {}).run(df)
            field = t.parse_json.field
            texts = [r[0] for r in before.selectExpr(f"CAST(`{field}` AS STRING)").collect()]
            result[f"transforms[{i}].parse_json"] = (
                t.parse_json.schema_ or infer_json_schema(spark, texts))
    if resolve_output(output) is Output.json:
        print_json(result)
    else:
        for key, value in result.items():
            typer.echo(f"{key}: {json.dumps(value) if not isinstance(value, str) else value}")


@connect_app.command("run")
@handle_errors
def run_cmd(
    file: FileArg,
    master: MasterOpt = None,
    conf: ConfOpt = None,
    available_now: Annotated[bool, typer.Option(
        "--available-now", help="process what is there now, then stop")] = False,
    max_seconds: Annotated[float | None, typer.Option(
        help="stop after this many seconds")] = None,
) -> None:
    """Run a pipeline as a Spark Structured Streaming query, with live progress.

    A restart with the same checkpoint resumes after the last completed batch.
    """
    _need_spark("run")
    from eddy.connect.runtime.progress import ProgressView
    from eddy.connect.runtime.runner import PipelineError, run
    from eddy.connect.runtime.status_reporter import StatusReporter

    p = _load(file)
    if available_now:
        p = p.model_copy(update={"trigger": "available-now"})
    _log_setup()
    spark = _spark(master, conf, p)
    view = ProgressView(p.name)
    reporter = StatusReporter.for_pipeline(p)  # to the topic _eddy_pipelines of its Eddy

    def progress(query: Any, prepared: Any) -> None:
        snap = view.update(query, prepared)
        if snap is not None and reporter is not None:
            reporter.report(snap)

    typer.echo(f"pipeline {p.name}: running on {spark.sparkContext.master}, "
               f"checkpoint {p.checkpoint_dir()}", err=True)
    ended = "failed"
    try:
        prepared = run(spark, p, on_progress=progress, max_seconds=max_seconds)
        ended = "stopped"
    except PipelineError as exc:
        if reporter is not None:
            reporter.close("failed", str(exc))
            reporter = None
        raise CliError(str(exc)) from None
    finally:
        view.close()
        if reporter is not None:
            reporter.close(ended)
    dead = sum(b.dead_letters for b in prepared.batches)
    typer.echo(f"pipeline {p.name}: stopped after {view.total_rows} record(s), "
               f"{dead} dead letter(s)", err=True)
