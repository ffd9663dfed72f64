"""The warehouse's upkeep: `logmetrics views` (the BI views, and the tables' properties) and
`logmetrics maintain` (OPTIMIZE and VACUUM every table)."""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor

from logmetrics.cli.arguments import config_arguments, positive_int
from logmetrics.cli.common import check_outputs_reachable, command_config, spark_for, writing
from logmetrics.config import Config
from logmetrics.errors import ConfigError

VACUUM_RETAIN_HOURS = 168


def add_maintain(commands: argparse._SubParsersAction) -> None:
    maintain = commands.add_parser(
        "maintain",
        help="compact the tables' small files (OPTIMIZE) and delete files no recent version "
        "reads (VACUUM)",
    )
    config_arguments(maintain)
    maintain.add_argument(
        "--vacuum-retain-hours",
        type=positive_int,
        default=VACUUM_RETAIN_HOURS,
        help=f"keep the files of the last N hours' versions (default {VACUUM_RETAIN_HOURS}, "
        "Delta's own minimum: readers and time travel within it stay safe)",
    )
    maintain.add_argument("--no-vacuum", action="store_true", help="compact only")
    maintain.set_defaults(handler=maintain_command)


def add_views(commands: argparse._SubParsersAction) -> None:
    views = commands.add_parser(
        "views",
        help="create or replace the BI views over the tables, and set output.table_properties "
        "on the tables that exist",
    )
    config_arguments(views)
    views.add_argument(
        "--out",
        "--sql-out",
        metavar="FILE",
        help="where the views' SQL goes when this session cannot keep them (no metastore): a "
        "local path or s3a://...; default <output.warehouse>/views.sql",
    )
    views.set_defaults(handler=views_command)


def maintain_command(args: argparse.Namespace) -> int:
    if args.vacuum_retain_hours < VACUUM_RETAIN_HOURS:
        raise ConfigError(
            f"--vacuum-retain-hours {args.vacuum_retain_hours} is below Delta's minimum of "
            f"{VACUUM_RETAIN_HOURS}: a shorter window can delete files a running reader needs"
        )
    config = command_config(args)
    from logmetrics.tables.catalog import (
        OUTPUT_TABLES,
        Table,
        apply_table_properties,
        optimize,
        small_listings,
        table_ref,
        vacuum,
    )

    check_outputs_reachable(config)
    spark = spark_for(config)

    def maintain(table: Table) -> str:
        where = table_ref(config.output, table)
        properties = apply_table_properties(spark, config.output, table)
        compacted = optimize(spark, config.output, table)
        if compacted is None:
            return f"{table.name}: not written yet ({where})"
        removed, added = compacted
        line = f"{table.name}: OPTIMIZE compacted {removed} file(s) into {added}"
        if properties:
            line += "; table properties set"
        if not args.no_vacuum:
            vacuum(spark, config.output, table, args.vacuum_retain_hours)
            line += f"; VACUUM kept the files of the last {args.vacuum_retain_hours} hours"
        return line

    # Tables side by side (each is a few small Spark jobs), reported in a fixed order.
    with writing(spark, config, args), small_listings(spark), ThreadPoolExecutor(4) as pool:
        for line in pool.map(maintain, OUTPUT_TABLES):
            print(line, flush=True)
    return 0


def views_command(args: argparse.Namespace) -> int:
    config = command_config(args)
    from logmetrics import storage
    from logmetrics.tables.catalog import OUTPUT_TABLES, apply_table_properties
    from logmetrics.tables.views import create_views, views_last, views_sql

    check_outputs_reachable(config)
    spark = spark_for(config)
    with writing(spark, config, args):
        for table in OUTPUT_TABLES:
            if apply_table_properties(spark, config.output, table):
                print(f"{table.name}: table properties set", flush=True)
    views, left_out = create_views(spark, config.output)
    for line in left_out:
        print(f"view {line}", flush=True)
    if views_last(spark):
        for view in views:
            print(f"view: {view}", flush=True)
        return 0
    out = args.out or _beside_warehouse(config, "views.sql")
    where = storage.place(out)
    if where is None:
        raise ConfigError(f"--out {out}: write the views' SQL to a local path or to S3")
    where.write_text(views_sql(config.output))
    print(
        f"views NOT kept: {', '.join(views)} ran against the tables, but this session's catalog "
        "is in memory (no metastore), so they end with it.\n"
        f"Their SQL is in {out}: run it in a Spark SQL session with Delta and a metastore "
        f"(spark-sql -f {out}), or set output.schema to create them in a catalog.",
        flush=True,
    )
    return 0


def _beside_warehouse(config: Config, name: str) -> str:
    """`<output.warehouse>/<name>`, or `name` in the working directory with catalog tables."""
    warehouse = config.output.warehouse
    return f"{warehouse.rstrip('/')}/{name}" if warehouse is not None else name
