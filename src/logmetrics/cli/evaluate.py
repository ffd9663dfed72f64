"""`logmetrics evaluate`: the configured runs scored against the judgments (`evaluation` in the
config), their rows of `evaluation_results` replaced, and two runs compared."""

from __future__ import annotations

import argparse

from logmetrics.cli.arguments import config_arguments
from logmetrics.cli.common import (
    check_outputs_reachable,
    command_config,
    now,
    spark_for,
    writing,
)
from logmetrics.config import Config


def add_evaluate(commands: argparse._SubParsersAction) -> None:
    evaluate = commands.add_parser(
        "evaluate", help="judged evaluation of retrieval runs, and a comparison of two"
    )
    config_arguments(evaluate)
    evaluate.set_defaults(handler=evaluate_command)


def evaluate_command(args: argparse.Namespace) -> int:
    from logmetrics.flows.evaluation import require_evaluation, run_evaluation
    from logmetrics.inputs.files import check_evaluation_inputs_exist, check_path_exists
    from logmetrics.rules.evaluation import format_averages, format_comparison

    config = command_config(args)
    settings = require_evaluation(config)
    clusters = config.inputs.clusters
    if clusters.location is not None:
        check_path_exists(clusters.location, "cluster table")
    check_evaluation_inputs_exist(settings.runs, settings.judgments)
    check_outputs_reachable(config)
    computed_at = now()
    spark = spark_for(config)
    with writing(spark, config, args):
        summary = run_evaluation(spark, config, args.run_id, computed_at)
    print("\n".join(summary.notes()))
    print()
    print(format_averages(summary.averages))
    if summary.pair is not None and summary.comparison is not None:
        a, b = summary.pair
        print()
        print(f"{b} vs {a} (paired randomisation test, two-sided):")
        print(format_comparison(summary.comparison, a, b))
    print()
    print(f"scores of {', '.join(summary.runs)} per query and averaged: {_results(config)}")
    return 0


def _results(config: Config) -> str:
    """Where `evaluation_results` is: `<output.warehouse>/evaluation_results` as configured,
    or its catalog name."""
    from logmetrics.tables.catalog import EVALUATION_RESULTS_TABLE, table_ref

    where = table_ref(config.output, EVALUATION_RESULTS_TABLE)
    warehouse = config.output.warehouse
    if where.name is None and warehouse is not None:
        return f"{warehouse.rstrip('/')}/{EVALUATION_RESULTS_TABLE.name}"
    return str(where)
