"""The served logs in their owners' names and shapes, turned into the contract here, where they
are read, so that rules, gates and writers only ever see the contract (docs/inputs.md).

- **Names**: `inputs.served_logs.columns` maps each of the contract's names (`request_id`,
  `served_at`, `results`, and each entry's `rank`, `chunk_id`, `tokens`) to the data's own; an
  unmapped name is the contract's own. Messages name the data's names, as the user wrote them.
- **Shapes**: `nested` (a list of entries per request, the contract's own), `ids` (a list of
  chunk ids in rank order: rank = 1-based position) and `exploded` (one row per served result;
  the rows of one request_id and served_at are one served copy: `group_result_rows`).

Everything here is decided from a schema alone (`contract_plan`: no session, so that the CLI
checks Parquet footers before Spark starts), then applied to a DataFrame (`to_contract`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    DataType,
    DoubleType,
    IntegralType,
    LongType,
    NumericType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from logmetrics.console import did_you_mean
from logmetrics.errors import InputError
from logmetrics.inputs.layout import ENTRY_FIELDS, NESTED, REQUEST_COLUMNS, LogShape, noun
from logmetrics.schemas import DISTINCT_ROWS, PARTITION_DATE, SERVED_AT_TEXT, STORED_ROWS

ROW_ORDER = "_row_order"
"""The exploded shape's order of the rows as stored (file, then position in it): the position
of each result in its request's list, which breaks ties of rank (docs/inputs.md)."""

Conversion = Callable[[Column], Column]
"""How a data column is read into the contract's column: a function of the column, so that it
is chosen without a session."""


@dataclass(frozen=True)
class ContractPlan:
    """How one schema of the data is read as the contract: each contract column (in the shape's
    own layout: the exploded shape has rank, chunk_id, tokens as columns) from the data column
    of the same meaning, and the contract's view of the whole (`nested`: request_id,
    served_at, results as the nested shape would store them, with the data's own types)."""

    columns: dict[str, tuple[str, Conversion]]  # contract column -> (data column, conversion)
    nested: dict[str, DataType]


def contract_plan(
    fields: Mapping[str, DataType], what: str, shape: LogShape = NESTED
) -> ContractPlan:
    """How the data with this schema ({name: type}) is read into the contract; an InputError
    naming the data's column (or field) when a column is missing, has a type the contract
    cannot read, or is of another shape than the configured one. No session needed."""
    for name in shape.read_columns():  # every column there before any type is judged
        if name != "tokens":
            _column(fields, name, what, shape)
    request_id = _column(fields, "request_id", what, shape)
    served_at = _column(fields, "served_at", what, shape)
    columns = {
        "request_id": (
            request_id,
            string_conversion(fields[request_id], shape.label("request_id"), what),
        ),
        "served_at": (
            served_at,
            _timestamp_conversion(fields[served_at], shape.label("served_at"), what),
        ),
    }
    if shape.exploded:
        entry = _exploded_entry(fields, what, shape)
        for name in entry.names:
            data = shape.name(name)
            columns[name] = (data, _entry_conversion(entry[name].dataType, name, what, shape))
        results: DataType = ArrayType(entry)
    else:
        list_name = _column(fields, "results", what, shape)
        results = fields[list_name]
        columns["results"] = (list_name, _list_conversion(results, what, shape))
        if shape.shape == "ids":
            results = ArrayType(
                StructType(
                    [StructField("rank", LongType()), StructField("chunk_id", _element(results))]
                )
            )
        else:
            results = ArrayType(_nested_entry(results, what, shape))
    nested = {"request_id": fields[request_id], "served_at": fields[served_at], "results": results}
    return ContractPlan(columns, nested)


def to_contract(raw: DataFrame, plan: ContractPlan) -> DataFrame:
    """The raw rows with the contract's columns in place of the data's (converted to the
    contract's types; a text served_at kept as `SERVED_AT_TEXT` too, its row quarantined when
    it does not parse). Other columns ride along; one named like a contract column that is not
    read as it (the data's own `results` beside the mapped `hits`) is left out."""
    read = {data for data, _ in plan.columns.values()}
    kept = [c for c in raw.columns if c not in read and c not in plan.columns]
    converted = [
        convert(quoted(data)).alias(name) for name, (data, convert) in plan.columns.items()
    ]
    served_at = plan.columns["served_at"][0]
    if isinstance(plan.nested["served_at"], StringType):
        converted.append(quoted(served_at).alias(SERVED_AT_TEXT))
    return raw.select(*[quoted(c) for c in kept], *converted)


def with_row_order(raw: DataFrame) -> DataFrame:
    """`ROW_ORDER`: the rows' order as stored (a hash of the file's path, then the position in
    the scan, which follows the file's own order). Taken at the scan, before any shuffle."""
    return raw.withColumn(
        ROW_ORDER,
        F.struct(
            F.xxhash64(F.input_file_name()).alias("file"),
            F.monotonically_increasing_id().alias("row"),
        ),
    )


def group_result_rows(rows_df: DataFrame, segment_by: Sequence[str] = ()) -> DataFrame:
    """Exploded rows (one per served result, the contract's columns) -> one row per served copy
    (request_id, served_at) with its `results` in the order the rows are stored:
    - rows identical in every column read (rank, chunk_id, tokens) count once (redelivered);
    - a copy whose one row has a null chunk_id is a request with no results (an empty list);
      otherwise a null chunk_id is an entry without one, set aside as in the nested shape;
    - a malformed row (a null request_id, or a null served_at: missing or a text that does not
      parse) is a copy of its own, its one entry as its `results`: one quarantine row per row;
    - `STORED_ROWS` counts the copy's rows as stored, `DISTINCT_ROWS` the distinct ones (what
      the copy enters the metrics with, if kept): the accounting of every row read;
    - the segment columns take their smallest value among the copy's rows;
    - a copy is its request_id and served_at alone, its rows in one date partition or several
      and its served_at spelled one way or another (text): the date partition and the served_at
      text, which only a malformed row's day and reason need, take their smallest value."""
    entry_names = [n for n in ENTRY_FIELDS if n in rows_df.columns]
    carried = [c for c in (SERVED_AT_TEXT, PARTITION_DATE) if c in rows_df.columns]
    is_malformed = F.col("request_id").isNull() | F.col("served_at").isNull()
    alone = F.when(is_malformed, F.col(ROW_ORDER)).alias("_alone")  # null for every valid row
    collected = F.sort_array(
        F.collect_list(
            F.struct(F.col(ROW_ORDER).alias("order"), F.struct(*entry_names).alias("entry"))
        )
    )
    entries = F.array_distinct(F.transform(F.col("_rows"), lambda row: row["entry"]))
    lone_null = F.col("_alone").isNull() & (F.size(entries) == 1) & entries[0]["chunk_id"].isNull()
    entry_type = StructType([rows_df.schema[n] for n in entry_names])
    empty = F.array().cast(ArrayType(entry_type))
    return (
        rows_df.groupBy("request_id", "served_at", alone)
        .agg(
            collected.alias("_rows"),
            F.count(F.lit(1)).alias(STORED_ROWS),
            *[F.min(quoted(c)).alias(c) for c in (*carried, *segment_by)],
        )
        .select(
            *REQUEST_COLUMNS,
            *carried,
            *segment_by,
            F.when(lone_null, empty).otherwise(entries).alias("results"),
            STORED_ROWS,
            F.size(entries).alias(DISTINCT_ROWS),
        )
    )


def json_schema(shape: LogShape) -> StructType:
    """What JSON-lines logs of this shape are read as: the contract's columns at their widest
    lossless types (served_at as text, converted as Parquet text is), in the data's names.
    Reading JSON with a schema never infers one (a pass over all the data)."""
    entry = [
        StructField(shape.name("rank"), LongType()),
        StructField(shape.name("chunk_id"), StringType()),
        StructField(shape.name("tokens"), DoubleType()),
    ]
    head = [
        StructField(shape.name("request_id"), StringType()),
        StructField(shape.name("served_at"), StringType()),
    ]
    if shape.exploded:
        return StructType([*head, *entry])
    element: DataType = StringType() if shape.shape == "ids" else StructType(entry)
    return StructType([*head, StructField(shape.name("results"), ArrayType(element))])


# --- what the data holds, named as the data names it --------------------------------------


def _column(fields: Mapping[str, DataType], contract: str, what: str, shape: LogShape) -> str:
    """The data's column for a contract column; an InputError when the data lacks it."""
    name = shape.name(contract)
    if name in fields:
        return name
    found = sorted(set(fields) - {"_corrupt_record"})
    hint = _shape_hint(fields, contract, shape)
    if shape.is_mapped(contract):
        raise InputError(
            f"columns.{contract}: no column {name!r} in the {noun(what)}"
            f"{did_you_mean(name, found)}{hint}"
        )
    raise InputError(
        f"{what}: required column {name!r} is missing (found: {', '.join(found) or 'none'}){hint}"
    )


def _shape_hint(fields: Mapping[str, DataType], contract: str, shape: LogShape) -> str:
    """Where the data holds a list the exploded shape was configured for (or the other way
    round): which shape reads it."""
    if shape.exploded and contract in ENTRY_FIELDS:
        for name, data_type in fields.items():
            other = _shape_of_list(data_type)
            if other is not None:
                return (
                    f"; column {name!r} is {data_type.simpleString()}, which "
                    f"`shape: {other}` reads (inputs.served_logs.shape is 'exploded')"
                )
    return ""


def _shape_of_list(data_type: DataType) -> str | None:
    """The shape that reads a list column of this type: nested or ids, or None."""
    if not isinstance(data_type, ArrayType):
        return None
    element = data_type.elementType
    if isinstance(element, StructType):
        return "nested"
    if isinstance(element, StringType | IntegralType):
        return "ids"
    return None


def _element(results: DataType) -> DataType:
    element = results.elementType if isinstance(results, ArrayType) else results
    return StringType() if isinstance(element, StringType) else element


def _list_conversion(data_type: DataType, what: str, shape: LogShape) -> Conversion:
    """The list column's conversion into the contract's `results`, for the nested and ids
    shapes; an InputError naming the shape that would read a list of another kind."""
    label = shape.label("results")
    found = _shape_of_list(data_type)
    if shape.shape == "ids":
        if found != "ids":
            fit = f", which `shape: {found}` reads" if found else ""
            raise InputError(
                f"{what}: column {label!r} is {data_type.simpleString()}{fit}; `shape: ids` "
                "reads a list of chunk ids (text or integers)"
            )
        return _ids_to_entries
    if found == "ids":
        raise InputError(
            f"{what}: column {label!r} is {data_type.simpleString()}, a list of chunk ids, "
            "which `shape: ids` reads (inputs.served_logs.shape is 'nested')"
        )
    _nested_entry(data_type, what, shape)  # checks the entries' fields
    element = data_type.elementType  # type: ignore[attr-defined]
    target = _renamed_entry(element, shape)
    if target == element:
        return _as_is
    return lambda column: column.cast(ArrayType(target))


def _ids_to_entries(column: Column) -> Column:
    """A list of chunk ids in rank order -> the contract's entries: rank = 1-based position."""
    return F.transform(
        column,
        lambda chunk_id, i: F.struct(
            (i + 1).cast("long").alias("rank"), chunk_id.cast("string").alias("chunk_id")
        ),
    )


def _nested_entry(data_type: DataType, what: str, shape: LogShape) -> StructType:
    """The entries of a nested list, as the contract names their fields (the data's types)."""
    label = shape.name("results")
    element = data_type.elementType if isinstance(data_type, ArrayType) else None
    if not isinstance(element, StructType):
        raise InputError(
            f"{what}: column {label!r} must be array<struct<rank:int,chunk_id:string>>, "
            f"found {data_type.simpleString()}"
        )
    entry = {f.name: f.dataType for f in element.fields}
    fields = []
    for name in ENTRY_FIELDS:
        own = shape.name(name)
        if own in entry:
            fields.append(StructField(name, entry[own]))
        elif shape.is_mapped(name):
            raise InputError(
                f"columns.{name}: no field {own!r} in the entries of {label!r} in the "
                f"{noun(what)}{did_you_mean(own, list(entry))}"
            )
        elif name != "tokens":
            raise InputError(f"{what}: column {label!r} has no field {own!r} in its entries")
    nested = StructType(fields)
    _check_entry(nested, what, shape)
    return nested


def _renamed_entry(element: StructType, shape: LogShape) -> StructType:
    """The entry struct with the contract's field names and types (an integer chunk id as
    text), field for field in the data's order: a cast renames by position. A field of the
    data named like a contract field it is not read as is renamed out of the way."""
    own = {shape.name(n): n for n in ENTRY_FIELDS}
    fields = []
    for field in element.fields:
        name = own.get(field.name)
        data_type = field.dataType
        if name is None and field.name in ENTRY_FIELDS:
            fields.append(StructField(f"_unread_{field.name}", data_type))
            continue
        if name == "chunk_id" and isinstance(data_type, IntegralType):
            data_type = StringType()
        fields.append(StructField(name or field.name, data_type, field.nullable))
    return StructType(fields)


def _exploded_entry(fields: Mapping[str, DataType], what: str, shape: LogShape) -> StructType:
    """The exploded shape's entry columns, as the contract names them (the data's types)."""
    entry = []
    for name in ENTRY_FIELDS:
        own = shape.name(name)
        if own in fields:
            entry.append(StructField(name, fields[own]))
        elif name != "tokens" or shape.is_mapped(name):
            _column(fields, name, what, shape)  # raises, naming it
    struct = StructType(entry)
    _check_entry(struct, what, shape)
    return struct


def _check_entry(entry: StructType, what: str, shape: LogShape) -> None:
    types = {f.name: f.dataType for f in entry.fields}
    rank = types["rank"]
    if not isinstance(rank, IntegralType):
        raise InputError(
            f"{what}: column {shape.label('results.rank')!r} must be an integer, "
            f"found {rank.simpleString()}"
        )
    if "tokens" in types and not isinstance(types["tokens"], NumericType):
        raise InputError(
            f"{what}: column {shape.label('results.tokens')!r} must be a number, "
            f"found {types['tokens'].simpleString()}"
        )
    chunk_id = types["chunk_id"]
    if not isinstance(chunk_id, StringType | IntegralType):
        raise InputError(
            f"{what}: column {shape.label('results.chunk_id')!r} must be a string, "
            f"found {chunk_id.simpleString()}"
        )


def _entry_conversion(data_type: DataType, name: str, what: str, shape: LogShape) -> Conversion:
    """An exploded entry column into the contract's type."""
    if name == "rank":
        return lambda column: column.cast(LongType())
    if name == "tokens":
        return lambda column: column.cast(DoubleType())
    return string_conversion(data_type, shape.label("results.chunk_id"), what)


def string_conversion(data_type: DataType, label: str, what: str) -> Conversion:
    """Text as it is, an integer id as its text; an InputError naming the column otherwise."""
    if isinstance(data_type, StringType):
        return _as_is
    if isinstance(data_type, IntegralType):
        return lambda column: column.cast("string")
    raise InputError(f"{what}: column {label!r} must be a string, found {data_type.simpleString()}")


def _timestamp_conversion(data_type: DataType, label: str, what: str) -> Conversion:
    if isinstance(data_type, TimestampType):
        return _as_is
    if isinstance(data_type, TimestampNTZType):  # wall-clock time, read as UTC
        return lambda column: column.cast(TimestampType())
    if isinstance(data_type, StringType):  # ISO 8601 text; null (then quarantined) if not
        return F.try_to_timestamp
    raise InputError(
        f"{what}: column {label!r} must be a timestamp, found {data_type.simpleString()}"
    )


def _as_is(column: Column) -> Column:
    return column


def quoted(name: str) -> Column:
    """The column called `name`, whatever characters it has (`a.b` is not a nested field)."""
    return F.col("`" + name.replace("`", "``") + "`")
