"""Conversions between the Slice types (``slice/crawler.ice``) and the plain core types of ``icecrawler.models``,
both ways: servants convert what arrives, gateways what they send. A core dataclass and its Slice struct have the
same fields, snake_case in the core and camelCase in Slice, so one mechanism (``StructMap``) converts every pair and
only the values that differ in kind are named (enums, nested structs, sequences, the fingerprint's sign). A field
added to a model and to the Slice struct is converted with no change here (``tests/foundation/test_models_and_rpc.py``
round-trips every one). ``icecrawler.rpc`` re-exports them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import fields
from operator import attrgetter
from typing import Any

from icecrawler.contract import crawler
from icecrawler.models import Account, Outcome, Post, Report, Review, Task, TaskKind

__all__ = [
    "post_from_slice",
    "post_to_slice",
    "report_from_slice",
    "report_to_slice",
    "review_from_slice",
    "review_to_slice",
    "task_from_slice",
    "task_to_slice",
]

Convert = Callable[[Any], Any]


def slice_name(field_name: str) -> str:
    """``lease_deadline_ms`` → ``leaseDeadlineMs``: the Slice spelling of a core field."""
    head, *rest = field_name.split("_")
    return head + "".join(part.title() for part in rest)


class StructMap[Model]:
    """One core dataclass and its Slice struct, whose fields stand in the same order (checked when first used).
    ``to_slice``/``from_slice`` hold converters for the fields whose values differ between the two; every other
    field is copied as it is. The fields are read with one ``attrgetter`` and passed by position: posts and reviews
    cross here by the thousand, and this keeps them as cheap as a hand-written constructor call."""

    def __init__(
        self,
        model: type[Model],
        struct: str,
        to_slice: Mapping[str, Convert] | None = None,
        from_slice: Mapping[str, Convert] | None = None,
    ) -> None:
        self.model = model
        self.struct = struct
        self.names = [f.name for f in fields(model)]  # type: ignore[arg-type]
        self.wire_names = [slice_name(name) for name in self.names]
        unknown = sorted(set(to_slice or {}).union(from_slice or {}).difference(self.names))
        if unknown:
            raise ValueError(f"{model.__name__} has no field {unknown}")
        self._read_model = attrgetter(*self.names)
        self._read_wire = attrgetter(*self.wire_names)
        self._to = [(self.names.index(name), convert) for name, convert in (to_slice or {}).items()]
        self._from = [(self.names.index(name), convert) for name, convert in (from_slice or {}).items()]
        self._slice_type: Any = None

    def _struct(self) -> Any:
        if self._slice_type is None:
            slice_type = getattr(crawler(), self.struct)
            declared = list(inspect.signature(slice_type.__init__).parameters)[1:]
            if declared != self.wire_names:
                raise TypeError(
                    f"Slice struct {self.struct} has fields {declared}, the core's {self.model.__name__} "
                    f"{self.wire_names} (in Slice spelling): same names in the same order, please"
                )
            self._slice_type = slice_type
        return self._slice_type

    def to(self, value: Model) -> Any:
        values = list(self._read_model(value))
        for index, convert in self._to:
            values[index] = convert(values[index])
        return self._struct()(*values)

    def back(self, value: Any) -> Model:
        values = list(self._read_wire(value))
        for index, convert in self._from:
            values[index] = convert(values[index])
        return self.model(*values)


def _signed64(value: int) -> int:
    """Slice longs are signed; fingerprints are unsigned 64-bit. Reinterpret the bits."""
    value &= 0xFFFFFFFFFFFFFFFF
    return value - (1 << 64) if value >= 1 << 63 else value


ACCOUNT = StructMap(Account, "Account")
TASK = StructMap(
    Task,
    "Task",
    to_slice={"kind": lambda kind: crawler().TaskKind[kind.name], "params": dict, "account": ACCOUNT.to},
    from_slice={"kind": lambda kind: TaskKind[kind.name], "params": dict, "account": ACCOUNT.back},
)
REPORT = StructMap(
    Report,
    "Report",
    to_slice={
        "outcome": lambda outcome: crawler().Outcome[outcome.name],
        "fingerprint": _signed64,
        "new_item_times_ms": list,
        "discovered_ids": list,
    },
    from_slice={
        "outcome": lambda outcome: Outcome[outcome.name],
        "fingerprint": lambda fingerprint: fingerprint & 0xFFFFFFFFFFFFFFFF,
        "new_item_times_ms": tuple,
        "discovered_ids": tuple,
    },
)
POST = StructMap(Post, "Post", to_slice={"pictures": list}, from_slice={"pictures": list})
REVIEW = StructMap(Review, "Review")


# The public conversions (``icecrawler.rpc`` re-exports them).
task_to_slice = TASK.to
task_from_slice = TASK.back
report_to_slice = REPORT.to
report_from_slice = REPORT.back
post_to_slice = POST.to
post_from_slice = POST.back
review_to_slice = REVIEW.to
review_from_slice = REVIEW.back
