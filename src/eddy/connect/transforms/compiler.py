"""Transforms compiled to Spark SQL column expressions (no Python UDFs).

Each transform of a pipeline becomes a function from DataFrame to DataFrame. A
row a transform cannot handle (JSON that does not parse, a failing cast or
timestamp) is not dropped: the transform sets ERROR_COLUMN on it, later
transforms pass it through untouched, and the runtime sends it to the
dead-letter topic. The `sql` transform runs user SQL over a view named `input`
holding the good rows; rows that failed before it are set aside first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from eddy.connect.batch import (
    ERROR_COLUMN,
    INTERNAL_COLUMNS,
    TOPIC_COLUMN,
)
from eddy.connect.reader.json_columns import PARSED_COLUMN
from eddy.connect.transforms.spec import (
    Cast,
    Drop,
    Filter,
    Mask,
    ParseJson,
    Rename,
    Route,
    RouteArgs,
    Select,
    Sql,
    Timestamp,
    Transform,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

CORRUPT = "_eddy_corrupt"
SQL_VIEW = "input"


class TransformError(ValueError):
    """A transform that cannot apply to the data it gets; names the transform."""


def q(name: str) -> str:
    """A column name quoted for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def lit_sql(text: str) -> str:
    """A string literal for Spark SQL."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _fail_if(df: DataFrame, failed: Column, message: Column) -> DataFrame:
    """Set ERROR_COLUMN to `message` on rows where `failed` holds (first error wins)."""
    from pyspark.sql import functions as F

    return df.withColumn(
        ERROR_COLUMN,
        F.when(F.col(ERROR_COLUMN).isNotNull(), F.col(ERROR_COLUMN)).when(
            failed, message
        ),
    )


def _require(df: DataFrame, column: str, where: str) -> None:
    if column not in df.columns:
        visible = [c for c in df.columns if c not in INTERNAL_COLUMNS]
        raise TransformError(f"{where}: no column {column!r} (columns: {', '.join(visible)})")


def _user_columns(df: DataFrame) -> list[str]:
    return [c for c in df.columns if c not in INTERNAL_COLUMNS]


@dataclass
class Step:
    """One compiled transform: `where` names it for messages (transforms[i].kind)."""

    where: str
    apply: Callable[[DataFrame, list[DataFrame]], DataFrame]


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)

    def run(self, df: DataFrame) -> tuple[DataFrame, list[DataFrame]]:
        """Apply every step; returns the output and frames of rows set aside as bad
        (before a `sql` step). Bad rows still in the output have ERROR_COLUMN set."""
        aside: list[DataFrame] = []
        for step in self.steps:
            try:
                df = step.apply(df, aside)
            except TransformError:
                raise
            except Exception as exc:  # Spark's AnalysisException and friends
                text = str(exc).strip() or type(exc).__name__
                raise TransformError(f"{step.where}: {text.splitlines()[0]}") from None
        return df, aside


# ---- the transforms -----------------------------------------------------------------------


def parse_json(t: ParseJson, schema: str | None, where: str) -> Step:
    args = t.parse_json
    if schema is None:
        raise TransformError(f"{where}: no schema (give `schema`, or let the runtime infer it)")

    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        from pyspark.sql import functions as F
        from pyspark.sql.types import StructType

        _require(df, args.field, where)
        struct = StructType.fromDDL(schema)
        assert isinstance(struct, StructType)
        with_corrupt = StructType(list(struct.fields)).add(CORRUPT, "string")
        text = F.col(args.field).cast("string")
        parsed = F.from_json(text, with_corrupt, {"columnNameOfCorruptRecord": CORRUPT,
                                                  "mode": "PERMISSIVE"})
        tmp = "_eddy_parsed"
        corrupt = F.col(f"{tmp}.{CORRUPT}").isNotNull()
        fields = [F.col(f"{tmp}.{q(f.name)}").alias(f.name) for f in struct.fields]
        if args.field == "value" and PARSED_COLUMN in df.columns:
            # the reader parsed most values already (json_columns): from_json only runs
            # where it did not, and its fields are taken only there
            pre = F.col(PARSED_COLUMN)
            parsed = F.when(pre.isNull(), parsed)
            corrupt = pre.isNull() & corrupt
            fields = [F.when(pre.isNull(), F.col(f"{tmp}.{q(f.name)}"))
                      .otherwise(pre[f.name]).alias(f.name) for f in struct.fields]
        df = df.withColumn(tmp, parsed)
        df = _fail_if(
            df,
            F.col(args.field).isNull() | corrupt,
            F.when(F.col(args.field).isNull(), F.lit(f"{where}: `{args.field}` is null"))
            .otherwise(F.lit(f"{where}: malformed JSON or a field not matching the schema "
                             f"{schema}")),
        )
        for name in args.keep:
            _require(df, name, where)
        internal = [F.col(q(c)) for c in df.columns if c in INTERNAL_COLUMNS]
        return df.select(*[F.col(q(c)) for c in args.keep], *fields, *internal)

    return Step(where, apply)


def mask(t: Mask, where: str) -> Step:
    a = t.mask

    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        from pyspark.sql import functions as F

        _require(df, a.field, where)
        c = f"CAST({q(a.field)} AS STRING)"
        if a.method == "redact":
            expr = f"CASE WHEN {q(a.field)} IS NULL THEN NULL ELSE {lit_sql(a.replacement)} END"
        elif a.method == "hash":
            expr = f"sha2(concat({lit_sql(a.salt)}, {c}), 256)"
        else:
            pad = lit_sql((a.replacement or "*")[0])
            expr = (f"concat(repeat({pad}, greatest(char_length({c}) - {a.keep}, 0)), "
                    f"right({c}, {a.keep}))")
        return df.withColumn(a.field, F.expr(expr))

    return Step(where, apply)


def rename(t: Rename, where: str) -> Step:
    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        for old in t.rename:
            _require(df, old, where)
        return df.withColumnsRenamed(dict(t.rename))

    return Step(where, apply)


def drop(t: Drop, where: str) -> Step:
    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        for name in t.drop:
            _require(df, name, where)
        return df.drop(*t.drop)

    return Step(where, apply)


def select(t: Select, where: str) -> Step:
    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        internal = [q(c) for c in df.columns if c in INTERNAL_COLUMNS]
        return df.selectExpr(*t.select, *internal)

    return Step(where, apply)


def cast(t: Cast, where: str) -> Step:
    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        from pyspark.sql import functions as F

        for name, type_name in t.cast.items():
            _require(df, name, where)
            converted = F.expr(f"try_cast({q(name)} AS {type_name})")
            tmp = "_eddy_cast"
            df = df.withColumn(tmp, converted)
            df = _fail_if(
                df,
                F.col(name).isNotNull() & F.col(tmp).isNull(),
                F.concat(F.lit(f"{where}: `{name}` value '"), F.col(name).cast("string"),
                         F.lit(f"' is not a valid {type_name.upper()}")),
            )
            df = df.withColumn(name, F.col(tmp)).drop(tmp)
        return df

    return Step(where, apply)


def timestamp(t: Timestamp, where: str) -> Step:
    a = t.timestamp

    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        from pyspark.sql import functions as F

        _require(df, a.field, where)
        c = q(a.field)
        if a.unit == "ms":
            expr = f"timestamp_millis(try_cast({c} AS BIGINT))"
        elif a.unit == "s":
            expr = f"timestamp_seconds(try_cast({c} AS BIGINT))"
        elif a.format:
            expr = f"try_to_timestamp(CAST({c} AS STRING), {lit_sql(a.format)})"
        else:
            expr = f"try_to_timestamp(CAST({c} AS STRING))"
        if a.zone:
            expr = f"to_utc_timestamp({expr}, {lit_sql(a.zone)})"
        target = a.to or a.field
        tmp = "_eddy_ts"
        df = df.withColumn(tmp, F.expr(expr))
        expected = a.format or (f"epoch {a.unit}" if a.unit else "ISO 8601")
        df = _fail_if(
            df,
            F.col(a.field).isNotNull() & F.col(tmp).isNull(),
            F.concat(F.lit(f"{where}: `{a.field}` value '"), F.col(a.field).cast("string"),
                     F.lit(f"' is not a timestamp ({expected})")),
        )
        return df.withColumn(target, F.col(tmp)).drop(tmp)

    return Step(where, apply)


def filter_(t: Filter, where: str) -> Step:
    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        # rows already bad pass through to the dead-letter topic
        return df.filter(f"({q(ERROR_COLUMN)} IS NOT NULL) OR coalesce(({t.filter}), false)")

    return Step(where, apply)


def route(t: Route, where: str) -> Step:
    expr = t.route.expr if isinstance(t.route, RouteArgs) else t.route

    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        from pyspark.sql import functions as F

        df = df.withColumn(TOPIC_COLUMN, F.expr(f"CAST(({expr}) AS STRING)"))
        return _fail_if(
            df,
            F.col(TOPIC_COLUMN).isNull() | (F.length(TOPIC_COLUMN) == 0),
            F.lit(f"{where}: the route expression gave no topic"),
        )

    return Step(where, apply)


def sql(t: Sql, where: str) -> Step:
    def apply(df: DataFrame, aside: list[DataFrame]) -> DataFrame:
        from pyspark.sql import functions as F

        aside.append(df.filter(F.col(ERROR_COLUMN).isNotNull()))
        good = df.filter(F.col(ERROR_COLUMN).isNull())
        good.drop(*[c for c in df.columns if c in INTERNAL_COLUMNS]).createOrReplaceTempView(
            SQL_VIEW)
        out = good.sparkSession.sql(t.sql)
        for name in INTERNAL_COLUMNS:
            if name in df.columns and name not in out.columns:
                out = out.withColumn(name, F.lit(None).cast(df.schema[name].dataType))
        return out

    return Step(where, apply)


def compile_plan(transforms: Sequence[Transform], json_schemas: dict[int, str]) -> Plan:
    """Compile a pipeline's transforms; `json_schemas[i]` is parse_json i's schema
    (given in the file or inferred by the runtime)."""
    plan = Plan()
    for i, t in enumerate(transforms):
        kind = next(iter(type(t).model_fields))
        where = f"transforms[{i}].{kind}"
        builders: dict[type[Any], Callable[[Any, str], Step]] = {
            Mask: mask, Rename: rename, Drop: drop, Select: select, Cast: cast,
            Timestamp: timestamp, Filter: filter_, Route: route, Sql: sql,
        }
        if isinstance(t, ParseJson):
            plan.steps.append(parse_json(t, json_schemas.get(i) or t.parse_json.schema_, where))
        else:
            plan.steps.append(builders[type(t)](t, where))
    return plan


def infer_json_schema(spark: SparkSession, texts: list[str]) -> str | None:
    """The DDL schema Spark infers from sample JSON documents (None if none parse)."""
    docs = [t for t in texts if t and t.strip()]
    if not docs:
        return None
    df = spark.read.option("mode", "DROPMALFORMED").json(spark.sparkContext.parallelize(docs))
    fields = [f for f in df.schema.fields if f.name != "_corrupt_record"]
    if not fields:
        return None
    return ", ".join(f"{q(f.name)} {f.dataType.simpleString()}" for f in fields)
