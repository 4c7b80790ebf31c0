"""`eddy registry subjects|versions|get|register|check|config|mode|delete`: the schema
registry from the command line, through its REST API (Confluent's paths).

Habits as the other client commands: `--output table|json|plain`, exit 0 on success, 1 on an
error (the registry's as `error <code>: <message>`), 2 on a usage error; `check` exits 1 when
the schema is not compatible. The registry's address: `--url` (env EDDY_REGISTRY_URL,
default http://127.0.0.1:8081).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, ParamSpec, TypeVar

import typer

from eddy.cli.common import (
    CliError,
    Output,
    OutputOpt,
    err,
    handle_errors,
    print_json,
    render_fields,
    render_table,
    resolve_output,
    stdout_console,
    usage_error,
)
from eddy.cli.registry_http import (
    DEFAULT_REGISTRY_URL,
    MAX_RESPONSE_BYTES,
    RegistryApiError,
    RegistryClient,
)

P = ParamSpec("P")
R = TypeVar("R")

registry_app = typer.Typer(
    help="The schema registry: subjects, versions, schemas, compatibility, config and mode.",
    no_args_is_help=True,
)

#: a schema version as a path or reference names it: 1 .. 2^31-1, or latest
_INT_MAX = (1 << 31) - 1
#: soft-delete answers that mean "already soft-deleted" (a permanent delete goes on)
_ALREADY_SOFT_DELETED = (40404, 40406)


class SchemaType(StrEnum):
    AVRO = "AVRO"
    JSON = "JSON"
    PROTOBUF = "PROTOBUF"


class Level(StrEnum):
    NONE = "NONE"
    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"


class Mode(StrEnum):
    READWRITE = "READWRITE"
    READONLY = "READONLY"
    READONLY_OVERRIDE = "READONLY_OVERRIDE"
    IMPORT = "IMPORT"


#: the type a schema file's extension implies
_EXTENSIONS = {".avsc": SchemaType.AVRO, ".json": SchemaType.JSON,
               ".proto": SchemaType.PROTOBUF}

UrlOpt = Annotated[str, typer.Option(
    "--url", "-u", envvar="EDDY_REGISTRY_URL", show_envvar=True,
    help="the schema registry's URL")]
SubjectArg = Annotated[str, typer.Argument(help="the subject, e.g. orders-value",
                                           metavar="SUBJECT")]
FileArg = Annotated[str, typer.Argument(
    help="the schema file (.avsc, .json or .proto)", metavar="FILE")]
DeletedOpt = Annotated[bool, typer.Option("--deleted", help="include soft-deleted ones")]
TypeOpt = Annotated[SchemaType | None, typer.Option(
    "--type", "-t", case_sensitive=False,
    help="the schema's type (default: from the file's extension: .avsc AVRO, .json JSON, "
         ".proto PROTOBUF)")]
ReferenceOpt = Annotated[list[str] | None, typer.Option(
    "--reference", "-r", metavar="NAME=SUBJECT:VERSION",
    help="a schema this one imports, e.g. common.proto=common:1 (VERSION may be latest; "
         "repeatable)")]
NormalizeOpt = Annotated[bool, typer.Option(
    "--normalize", help="normalize the schema first (the registry's normalize=true)")]


def registry_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """`handle_errors`, plus the registry's own errors as `error <code>: <message>`."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except RegistryApiError as exc:
            err(f"error {exc.code}: {exc.message}")
            raise typer.Exit(1) from None

    return handle_errors(wrapper)


# ---- arguments ----------------------------------------------------------------------------


def parse_version(text: str, what: str = "VERSION") -> str | int:
    """``latest`` or a version number (1 .. 2^31-1); anything else is a usage error."""
    if text.lower() == "latest":
        return "latest"
    if text.isascii() and text.isdigit() and len(text) <= 10 and 1 <= int(text) <= _INT_MAX:
        return int(text)
    usage_error(f"{what} must be a version number (1, 2, ...) or latest, got {text!r}")


def parse_reference(text: str) -> dict[str, Any]:
    """``NAME=SUBJECT:VERSION`` (or ``NAME=SUBJECT``, the latest) as Confluent's reference."""
    name, sep, target = text.partition("=")
    if not sep or not name.strip() or not target:
        usage_error(f"--reference expects NAME=SUBJECT:VERSION, got {text!r}")
    subject, colon, version = target.rpartition(":")
    if not colon or not subject:
        subject, version = target, "latest"
    number = parse_version(version, "--reference VERSION")
    return {"name": name.strip(), "subject": subject,
            "version": -1 if number == "latest" else number}


def schema_type_of(file: str, given: SchemaType | None) -> SchemaType:
    if given is not None:
        return given
    found = _EXTENSIONS.get(Path(file).suffix.lower())
    if found is None:
        usage_error(f"cannot tell the schema type of {file!r} from its extension; give "
                    f"--type AVRO, JSON or PROTOBUF")
    return found


def read_schema(file: str) -> str:
    """The schema file's text (UTF-8), refused beyond what the registry takes."""
    path = Path(file)
    try:
        size = path.stat().st_size
        if size > MAX_RESPONSE_BYTES:
            raise CliError(f"{file}: {size} bytes, more than a schema may be "
                           f"({MAX_RESPONSE_BYTES} bytes)")
        data = path.read_bytes()
    except OSError as exc:
        raise CliError(f"{file}: cannot read the schema file ({exc.strerror or exc})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CliError(f"{file}: not UTF-8 text (byte {exc.start})") from None


def schema_body(file: str, schema_type: SchemaType | None,
                references: list[str] | None) -> dict[str, Any]:
    """The body of a register or compatibility request for ``file``."""
    kind = schema_type_of(file, schema_type)
    refs = [parse_reference(r) for r in references or []]
    body: dict[str, Any] = {"schema": read_schema(file), "schemaType": kind.value}
    if refs:
        body["references"] = refs
    return body


def reference_text(ref: Any) -> str:
    if isinstance(ref, dict):
        return f"{ref.get('name')}={ref.get('subject')}:{ref.get('version')}"
    return str(ref)


def pretty_schema(text: str) -> str:
    """A JSON schema text indented for a person; any other text as it is."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


# ---- subjects and versions ----------------------------------------------------------------


@registry_app.command("subjects")
@registry_errors
def subjects(
    deleted: DeletedOpt = False,
    prefix: Annotated[str | None, typer.Option(
        "--prefix", help="only subjects starting with this")] = None,
    url: UrlOpt = DEFAULT_REGISTRY_URL,
    output: OutputOpt = None,
) -> None:
    """List the subjects."""
    out = resolve_output(output)
    with RegistryClient(url) as client:
        names = client.call("GET", ["subjects"],
                            {"deleted": deleted or None, "subjectPrefix": prefix}, expect=list)
    if out is Output.json:
        print_json(names)
    elif out is Output.plain:
        for name in names:
            typer.echo(name)
    elif names:
        render_table(out, ["SUBJECT"], [[n] for n in names])
    else:
        typer.echo("no subjects; register a schema with eddy registry register SUBJECT FILE")


@registry_app.command("versions")
@registry_errors
def versions(subject: SubjectArg, deleted: DeletedOpt = False,
             url: UrlOpt = DEFAULT_REGISTRY_URL, output: OutputOpt = None) -> None:
    """List a subject's versions."""
    out = resolve_output(output)
    with RegistryClient(url) as client:
        found = client.call("GET", ["subjects", subject, "versions"],
                            {"deleted": deleted or None}, expect=list)
    if out is Output.json:
        print_json(found)
    elif out is Output.plain:
        for v in found:
            typer.echo(str(v))
    else:
        render_table(out, ["VERSION"], [[v] for v in found], title=f"subject {subject}")


@registry_app.command("get")
@registry_errors
def get(
    subject: Annotated[str | None, typer.Argument(help="the subject")] = None,
    version: Annotated[str, typer.Argument(help="a version number or latest")] = "latest",
    schema_id: Annotated[int | None, typer.Option(
        "--id", min=1, help="the schema with this id instead of a subject's version")] = None,
    deleted: Annotated[bool, typer.Option(
        "--deleted", help="a soft-deleted version too")] = False,
    schema_only: Annotated[bool, typer.Option(
        "--schema-only", help="print only the schema's text")] = False,
    url: UrlOpt = DEFAULT_REGISTRY_URL,
    output: OutputOpt = None,
) -> None:
    """A schema: by SUBJECT [VERSION] (default latest) or by --id."""
    if (subject is None) == (schema_id is None):
        usage_error("give SUBJECT [VERSION] or --id N (one of them)")
    out = resolve_output(output)
    with RegistryClient(url) as client:
        if schema_id is not None:
            found = client.call("GET", ["schemas", "ids", schema_id], expect=dict)
            used_by = client.call("GET", ["schemas", "ids", schema_id, "versions"],
                                  {"deleted": deleted or None}, expect=list)
            found = {"id": schema_id, **found, "versions": used_by}
        else:
            assert subject is not None
            found = client.call("GET", ["subjects", subject, "versions",
                                        parse_version(version)], {"deleted": deleted or None},
                                expect=dict)
    if not isinstance(found.get("schema"), str):
        raise CliError(f"the registry at {url} answered without a schema: {found!r:.200}")
    found.setdefault("schemaType", "AVRO")
    if not isinstance(found.setdefault("references", []), list):
        raise CliError(f"the registry at {url} answered 'references' that is not a list")
    if schema_only:
        typer.echo(found["schema"], nl=not found["schema"].endswith("\n"))
    elif out is Output.json:
        print_json(found)
    else:
        fields: list[tuple[str, Any]] = [(k, found[k]) for k in ("subject", "version")
                                         if k in found]
        fields += [("id", found.get("id")), ("type", found["schemaType"]),
                   ("references", [reference_text(r) for r in found["references"]] or None)]
        if "versions" in found:
            fields.append(("used by", [f"{v.get('subject')}:{v.get('version')}"
                                       for v in found["versions"] if isinstance(v, dict)]))
        render_fields(out, fields)
        if out is Output.plain:
            typer.echo("schema:\n" + found["schema"])
        else:
            console = stdout_console()
            console.print("[bold]schema[/bold]")
            console.print(pretty_schema(found["schema"]), markup=False)


# ---- register and check -------------------------------------------------------------------


@registry_app.command("register")
@registry_errors
def register(subject: SubjectArg, file: FileArg, schema_type: TypeOpt = None,
             reference: ReferenceOpt = None, normalize: NormalizeOpt = False,
             url: UrlOpt = DEFAULT_REGISTRY_URL, output: OutputOpt = None) -> None:
    """Register the schema in FILE under SUBJECT; prints its id.

    A schema the subject already has answers its id again (no new version).
    """
    body = schema_body(file, schema_type, reference)
    out = resolve_output(output)
    with RegistryClient(url) as client:
        answer = client.call("POST", ["subjects", subject, "versions"],
                             {"normalize": normalize or None}, body, expect=dict)
    if out is Output.json:
        print_json(answer)
    elif out is Output.plain:
        typer.echo(str(answer.get("id")))
    else:
        typer.echo(f"registered under subject '{subject}': schema id {answer.get('id')}")


@registry_app.command("check")
@registry_errors
def check(
    subject: SubjectArg,
    file: FileArg,
    version: Annotated[str, typer.Option(
        "--version", "-v",
        help="the version to check against: a number, latest, or all (as registering "
             "would check)")] = "latest",
    verbose: Annotated[bool, typer.Option(
        "--verbose", help="say why a schema is not compatible")] = False,
    schema_type: TypeOpt = None,
    reference: ReferenceOpt = None,
    normalize: NormalizeOpt = False,
    url: UrlOpt = DEFAULT_REGISTRY_URL,
    output: OutputOpt = None,
) -> None:
    """Is the schema in FILE compatible with SUBJECT's version? Exit 0 if so, 1 if not."""
    path: list[str | int] = ["compatibility", "subjects", subject, "versions"]
    if version.lower() != "all":
        path.append(parse_version(version, "--version"))
    body = schema_body(file, schema_type, reference)
    out = resolve_output(output)
    with RegistryClient(url) as client:
        answer = client.call("POST", path, {"verbose": verbose or None,
                                            "normalize": normalize or None}, body, expect=dict)
    compatible = answer.get("is_compatible") is True
    against = "every version" if version.lower() == "all" else f"version {version}"
    if out is Output.json:
        print_json(answer)
    elif compatible:
        typer.echo(f"compatible with subject '{subject}' {against}")
    else:
        messages = answer.get("messages")
        messages = messages if isinstance(messages, list) else []
        typer.echo(f"incompatible with subject '{subject}' {against}"
                   + (":" if messages else ""))
        for message in messages:
            typer.echo(f"  - {message}")
    if not compatible:
        raise typer.Exit(1)


# ---- config and mode ----------------------------------------------------------------------


def _scope(subject: str | None) -> str:
    return f"subject '{subject}'" if subject is not None else "the registry (global)"


def _show(out: Output, answer: Any, subject: str | None, key: str, label: str) -> None:
    if out is Output.json:
        print_json(answer)
        return
    fields: list[tuple[str, Any]] = [("scope", subject if subject is not None else "global"),
                                     (label, answer.get(key))]
    fields += [(k, v) for k, v in answer.items() if k != key]
    render_fields(out, fields)


@registry_app.command("config")
@registry_errors
def config(
    subject: Annotated[str | None, typer.Argument(
        help="a subject (default: the global config)")] = None,
    set_: Annotated[Level | None, typer.Option(
        "--set", case_sensitive=False, help="set the compatibility level")] = None,
    delete: Annotated[bool, typer.Option(
        "--delete", help="remove the level set here (the global one applies again)")] = False,
    effective: Annotated[bool, typer.Option(
        "--effective", help="the level in force for SUBJECT (the global one when it has "
                            "none)")] = False,
    url: UrlOpt = DEFAULT_REGISTRY_URL,
    output: OutputOpt = None,
) -> None:
    """Show, set or delete a compatibility level (global or a subject's)."""
    if sum((set_ is not None, delete, effective)) > 1:
        usage_error("--set, --delete and --effective go alone")
    out = resolve_output(output)
    path: list[str | int] = ["config"] if subject is None else ["config", subject]
    with RegistryClient(url) as client:
        if set_ is not None:
            answer = client.call("PUT", path, None, {"compatibility": set_.value},
                                 expect=dict)
        elif delete:
            answer = client.call("DELETE", path, expect=dict)
        else:
            answer = client.call("GET", path, {"defaultToGlobal": effective or None},
                                 expect=dict)
    if out is Output.json or not (set_ is not None or delete):
        _show(out, answer, subject, "compatibilityLevel", "compatibility")
    elif set_ is not None:
        typer.echo(f"compatibility of {_scope(subject)} set to {set_.value}")
    else:
        was = answer.get("compatibilityLevel")
        typer.echo(f"compatibility of {_scope(subject)} deleted (was {was or 'not set'})")


@registry_app.command("mode")
@registry_errors
def mode(
    subject: Annotated[str | None, typer.Argument(
        help="a subject (default: the global mode)")] = None,
    set_: Annotated[Mode | None, typer.Option(
        "--set", case_sensitive=False, help="set the mode")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="with --set IMPORT: even though subjects exist")] = False,
    delete: Annotated[bool, typer.Option(
        "--delete", help="remove the mode set here")] = False,
    url: UrlOpt = DEFAULT_REGISTRY_URL,
    output: OutputOpt = None,
) -> None:
    """Show, set or delete a mode: READWRITE, READONLY, READONLY_OVERRIDE or IMPORT."""
    if set_ is not None and delete:
        usage_error("--set and --delete go alone")
    if force and set_ is None:
        usage_error("--force goes with --set")
    out = resolve_output(output)
    path: list[str | int] = ["mode"] if subject is None else ["mode", subject]
    with RegistryClient(url) as client:
        if set_ is not None:
            answer = client.call("PUT", path, {"force": force or None}, {"mode": set_.value},
                                 expect=dict)
        elif delete:
            answer = client.call("DELETE", path, expect=dict)
        else:
            answer = client.call("GET", path, expect=dict)
    if out is Output.json or not (set_ is not None or delete):
        _show(out, answer, subject, "mode", "mode")
    elif set_ is not None:
        typer.echo(f"mode of {_scope(subject)} set to {set_.value}")
    else:
        was = answer.get("mode")
        typer.echo(f"mode of {_scope(subject)} deleted (was {was})")


# ---- delete -------------------------------------------------------------------------------


@registry_app.command("delete")
@registry_errors
def delete(
    subject: SubjectArg,
    version: Annotated[str | None, typer.Argument(
        help="one version (a number or latest); default: the whole subject")] = None,
    permanent: Annotated[bool, typer.Option(
        "--permanent", help="delete for good (soft-deletes first when needed)")] = False,
    url: UrlOpt = DEFAULT_REGISTRY_URL,
    output: OutputOpt = None,
) -> None:
    """Delete a subject or one of its versions: soft (ids stay readable) or --permanent."""
    path: list[str | int] = ["subjects", subject]
    if version is not None:
        path += ["versions", parse_version(version)]
    out = resolve_output(output)
    with RegistryClient(url) as client:
        try:
            answer = client.call("DELETE", path, expect=(list, int))
        except RegistryApiError as exc:
            if not permanent or exc.code not in _ALREADY_SOFT_DELETED:
                raise
        if permanent:
            answer = client.call("DELETE", path, {"permanent": True}, expect=(list, int))
    deleted = answer if isinstance(answer, list) else [answer]
    if out is Output.json:
        print_json({"subject": subject, "versions": deleted, "permanent": permanent})
        return
    how = "permanently deleted" if permanent else "soft-deleted"
    what = "version" if len(deleted) == 1 else "versions"
    typer.echo(f"{how} subject '{subject}' {what} {', '.join(str(v) for v in deleted)}")
