"""The verdict of a paired difference's interval, shared by the statistics' result
(`situate.tasks.retrieval.stats.Difference`) and the report's record of it
(`situate.tasks.retrieval.evaluation.Comparison`). Imports nothing, so the report's types load
without numpy."""

from __future__ import annotations

from typing import TYPE_CHECKING


class Significance:
    """For a record with `low` and `high`, the bounds of a difference's 95% interval. Declares no
    fields at run time: the dataclass or model that mixes it in keeps its own, in its own order."""

    __slots__ = ()

    if TYPE_CHECKING:
        low: float
        high: float

    @property
    def significant(self) -> bool:
        """False when the interval covers 0: these queries cannot tell the two apart."""
        return not (self.low <= 0 <= self.high)
