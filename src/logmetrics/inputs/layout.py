"""How the served logs are stored, as the config says it: their shape (nested, ids, exploded) and
their own names for the contract's columns (docs/inputs.md, "Logs as they are"). Names only, no
Spark types: the converters into the contract (`inputs.shapes`) and the file-level answers given
before PySpark is imported both read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from logmetrics.config import ServedLogsInput

ENTRY_FIELDS = ("rank", "chunk_id", "tokens")
"""The contract's fields of a result entry: columns of their own in the exploded shape."""

REQUEST_COLUMNS = ("request_id", "served_at")
"""The contract's columns of a request in every shape: request_id, served_at."""

SPAN_READ_COLUMNS = ("span_id", "start_time_unix_nano", "attributes")
"""The columns a spans table must have (OpenTelemetry's names, or the data's in `columns`)."""


@dataclass(frozen=True)
class LogShape:
    """How the served logs are stored: their shape and their names for the contract's."""

    shape: str = "nested"
    mapped: Mapping[str, str] | None = None  # contract name -> the data's, as configured

    @classmethod
    def of(cls, source: ServedLogsInput) -> LogShape:
        return cls(source.shape, source.columns.mapped())

    def name(self, contract: str) -> str:
        """The data's name of a contract column or entry field."""
        return (self.mapped or {}).get(contract, contract)

    def is_mapped(self, contract: str) -> bool:
        return contract in (self.mapped or {})

    @property
    def exploded(self) -> bool:
        return self.shape == "exploded"

    def label(self, contract: str) -> str:
        """The data's own name for a contract column, or entry field (`results.rank`), as a
        message shows it: `hits.pos` nested, `pos` exploded, `hits` (its elements) for ids."""
        head, _, field = contract.partition(".")
        if not field:
            return self.name(head)
        if self.exploded:
            return self.name(field)
        if self.shape == "ids":
            return self.name("results")
        return f"{self.name('results')}.{self.name(field)}"

    def read_columns(self) -> tuple[str, ...]:
        """The contract's names of the top-level columns this shape reads (a span table's
        own, for spans)."""
        if self.shape == "spans":
            return SPAN_READ_COLUMNS
        listed = ENTRY_FIELDS if self.exploded else ("results",)
        return (*REQUEST_COLUMNS, *listed)

    def data_columns(self) -> set[str]:
        """The data's names of the columns the contract is read from."""
        return {self.name(c) for c in self.read_columns()}


NESTED = LogShape()


def noun(what: str) -> str:
    """`served logs` of `served logs at /path`."""
    for noun in ("served logs", "cluster table"):
        if what.startswith(noun):
            return noun
    return what
