"""Many results of one kind kept as columns, each made again as an object when asked.

A trace of a hundred thousand short steps has a hundred thousand results of each
analysis: as objects, a dozen small dataclasses, lists and dicts a step, every number a
boxed float, about 5 kB a step. `pack` keeps them as columns instead: numbers in numpy
arrays (8 bytes each), the fields of dataclasses and the entries of dicts with one set
of keys as one column each, lists flattened with their offsets, a value every one
shares once. `column[i]` makes the i-th value again, equal to the one packed and of the
same types (a float stays a float, a tuple a tuple), so what is written from it is the
same. Columns pickle (a forked process sends its steps back packed).
"""

from __future__ import annotations

import abc
import collections
import dataclasses
import enum
import functools
import itertools
import operator
import types
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar, cast

import numpy as np
import orjson

T = TypeVar("T")

__all__ = [
    "Column",
    "dumps",
    "object_texts",
    "pack",
    "record",
    "records",
    "scalar_texts",
    "value_texts",
]


class Column:
    """Values of one kind, packed; `column[i]` is the i-th, made again."""

    __slots__ = ("_length", "_part")

    def __init__(self, part: _Part, length: int) -> None:
        self._part, self._length = part, length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, i: int) -> Any:
        if not -self._length <= i < self._length:
            raise IndexError(i)
        return self._part.get(i % self._length)

    def values(self) -> list[Any]:
        """Every value, made again at once (much faster than one at a time)."""
        return self._part.values(self._length)

    def plain_values(self) -> list[Any]:
        """Every value made again at once, a dataclass as a new dict of its fields (in
        their order, their values as `values` makes them), a list or tuple of them as a
        list of such dicts: what a JSON writer needs of a result, without making the
        dataclasses first."""
        return self._part.plain(self._length)

    def texts(self) -> list[bytes]:
        """Every value's compact JSON text, as orjson writes it (`OPT_NON_STR_KEYS`; a
        dataclass as the dict of the fields its __init__ sets, the same as its
        `plain_values` form where that is every field), made at once from the columns:
        a column of scalars is written by one call, a dataclass by filling a template
        of its keys."""
        return self._part.texts(self._length)

    def texts_with(self, more: Sequence[tuple[str, Sequence[Any]]]) -> list[bytes] | None:
        """`texts` of a column of dataclasses of one type, each object followed by more
        keys (a key and its value for each value of the column); None for a column of
        anything else."""
        if not isinstance(self._part, _Records):
            return None
        n, part = self._length, self._part
        columns = [p.texts(n) for p in part.parts] + [value_texts(v) for _, v in more]
        return object_texts((*part.names, *(key for key, _ in more)), columns, n)


def pack(values: Sequence[Any]) -> Column:
    """`values` as a column: `pack(values)[i]` equals `values[i]` and is of its type.

    A value is made again from its parts, so a result must be a value (a frozen
    dataclass, a tuple, a number), not something whose identity matters; an object all
    values share (an enum member, None, a string) is kept once and given back as is."""
    return Column(_part(list(values)), len(values))


class _Part(abc.ABC):
    """One way of keeping a column's values."""

    __slots__ = ()

    @abc.abstractmethod
    def get(self, i: int) -> Any:
        """The i-th value, made again."""

    @abc.abstractmethod
    def values(self, n: int) -> list[Any]:
        """All `n` values."""

    def plain(self, n: int) -> list[Any]:
        """All `n` values, each dataclass (or each in a list or tuple) as a new dict of
        its fields."""
        return [_fields(v) for v in self.values(n)]

    def texts(self, n: int) -> list[bytes]:
        """All `n` values' JSON texts (see `Column.texts`)."""
        return list(map(dumps, self.values(n)))


_AS_IS = frozenset({str, float, int, bool, type(None)})


def dumps(value: Any) -> bytes:
    """`value`'s compact JSON text, as the JSON reports write it."""
    text: bytes = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS)
    return text


def scalar_texts(values: Sequence[Any]) -> list[bytes]:
    """The JSON text of each of `values` (numbers, strings, enums, None: no container),
    by one call to orjson: indented, it puts each on a line of its own, and no JSON
    text of a scalar holds a line break."""
    if not len(values):
        return []
    text = orjson.dumps(list(values), option=orjson.OPT_INDENT_2)
    return text[4:-2].split(b",\n  ")  # between "[\n  " and "\n]"


def value_texts(values: Sequence[Any]) -> list[bytes]:
    """The JSON text of each of `values`: at once where all are scalars
    (`scalar_texts`), else one by one."""
    if all(k in _AS_IS or _scalar_enum(k) for k in set(map(type, values))):
        return scalar_texts(values)
    return list(map(dumps, values))


@functools.cache
def _scalar_enum(kind: type) -> bool:
    """Whether `kind` is an enum whose members' values are all scalars (orjson writes a
    member as its value)."""
    return issubclass(kind, enum.Enum) and all(type(m.value) in _AS_IS for m in kind)


def object_texts(keys: Sequence[Any], columns: Sequence[Sequence[bytes]], n: int) -> list[bytes]:
    """`n` JSON objects' texts, the i-th with each of `keys` and the i-th of its column
    of JSON texts (as orjson writes a dict of them)."""
    if not keys:
        return [b"{}"] * n
    # A key's text as orjson writes it in a dict (a non-string key too), '%' escaped.
    names = [dumps({k: None})[1:-6].replace(b"%", b"%%") for k in keys]
    template = b"{" + b",".join(name + b":%b" for name in names) + b"}"
    return [template % row for row in zip(*columns, strict=True)]


def _fields(value: Any) -> Any:
    """A dataclass as a new dict of its fields, a list or tuple as a list of its items
    so; anything else as it is."""
    if type(value) in _AS_IS:  # most values: a long trace has millions
        return value
    if isinstance(value, (list, tuple)):
        return [_fields(v) for v in value]
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    return {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}


def _part(values: list[Any]) -> _Part:
    """What keeps `values`, in the most compact form their types allow."""
    if not values:
        return _Objects(values)
    first = values[0]
    kind = type(first)
    # A long trace's columns hold a million values: the search for another object stops
    # at the first (most columns differ at once), the set of types is made by map.
    if kind not in (list, dict) and next((v for v in values if v is not first), first) is first:
        return _Same(first)
    if len(set(map(type, values))) > 1:
        return _Objects(values)
    if kind in (float, bool) or (
        kind is int and _INT64[0] <= min(values) <= max(values) <= _INT64[1]
    ):
        return _Numbers(np.array(values, dtype=_DTYPES[kind]))
    if kind is np.ndarray and all(v.ndim == 1 and v.dtype == first.dtype for v in values):
        return _Arrays(_offsets([len(v) for v in values]), np.concatenate(values))
    if kind in (list, tuple):
        return _Runs(
            kind, _offsets([len(v) for v in values]), _part([x for v in values for x in v])
        )
    if kind is dict:
        return _dicts(values)
    if dataclasses.is_dataclass(kind) and all(f.init for f in dataclasses.fields(kind)):
        names = tuple(f.name for f in dataclasses.fields(kind))
        return _Records(
            kind, names, [_part(list(map(operator.attrgetter(n), values))) for n in names]
        )
    return _Objects(values)


_INT64 = (-(2**63), 2**63 - 1)
_DTYPES = {float: np.float64, bool: np.bool_, int: np.int64}


def _offsets(lengths: list[int]) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _dicts(values: list[dict[Any, Any]]) -> _Part:
    """Dicts: where all have the same keys in the same order, one column a key; else
    their keys and their values in a column each, a dict a run of them."""
    keys = tuple(values[0])
    if all(len(v) == len(keys) and tuple(v) == keys for v in values):
        return _Keyed(keys, [_part([v[k] for v in values]) for k in keys])
    offsets = _offsets([len(v) for v in values])
    return _Mappings(
        offsets,
        _part([k for v in values for k in v]),
        _part([x for v in values for x in v.values()]),
    )


class _Objects(_Part):
    """The values themselves (of mixed or unpackable types)."""

    __slots__ = ("items",)

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def get(self, i: int) -> Any:
        return self.items[i]

    def values(self, n: int) -> list[Any]:
        return list(self.items)

    def texts(self, n: int) -> list[bytes]:
        return value_texts(self.items)


class _Same(_Part):
    """One object that every value is."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self, i: int) -> Any:
        return self.value

    def values(self, n: int) -> list[Any]:
        return [self.value] * n

    def texts(self, n: int) -> list[bytes]:
        return [dumps(self.value)] * n


class _Numbers(_Part):
    """Floats, ints or bools of one type, in a numpy array (`item` gives the Python type)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def get(self, i: int) -> Any:
        return self.array.item(i)

    def values(self, n: int) -> list[Any]:
        found: list[Any] = self.array.tolist()
        return found

    def texts(self, n: int) -> list[bytes]:
        return scalar_texts(self.array.tolist())


class _Arrays(_Part):
    """One-dimensional arrays of one dtype, joined: each value a slice."""

    __slots__ = ("joined", "offsets")

    def __init__(self, offsets: np.ndarray, joined: np.ndarray) -> None:
        self.offsets, self.joined = offsets, joined

    def get(self, i: int) -> Any:
        at = self.offsets.item
        return self.joined[at(i) : at(i + 1)]

    def values(self, n: int) -> list[Any]:
        joined = self.joined
        return [joined[a:b] for a, b in itertools.pairwise(self.offsets.tolist())]


class _Runs(_Part):
    """Lists or tuples: their items in one part, each value a run of it."""

    __slots__ = ("items", "kind", "offsets")

    def __init__(self, kind: type, offsets: np.ndarray, items: _Part) -> None:
        self.kind, self.offsets, self.items = kind, offsets, items

    def get(self, i: int) -> Any:
        get, at = self.items.get, self.offsets.item
        return self.kind([get(k) for k in range(at(i), at(i + 1))])

    def values(self, n: int) -> list[Any]:
        offsets = self.offsets.tolist()
        items, kind = self.items.values(offsets[-1]), self.kind
        return [kind(items[a:b]) for a, b in itertools.pairwise(offsets)]

    def plain(self, n: int) -> list[Any]:
        # Each value a list of its items' dicts (a JSON array, as a tuple is written).
        offsets = self.offsets.tolist()
        items = self.items.plain(offsets[-1])
        return [items[a:b] for a, b in itertools.pairwise(offsets)]

    def texts(self, n: int) -> list[bytes]:
        offsets = self.offsets.tolist()
        items = self.items.texts(offsets[-1])
        return [b"[" + b",".join(items[a:b]) + b"]" for a, b in itertools.pairwise(offsets)]


class _Keyed(_Part):
    """Dicts of one set of keys: a part a key."""

    __slots__ = ("keys", "parts")

    def __init__(self, keys: tuple[Any, ...], parts: list[_Part]) -> None:
        self.keys, self.parts = keys, parts

    def get(self, i: int) -> Any:
        return {k: p.get(i) for k, p in zip(self.keys, self.parts, strict=True)}

    def values(self, n: int) -> list[Any]:
        return _rows(self.keys, self.parts, n)

    def texts(self, n: int) -> list[bytes]:
        return object_texts(self.keys, [p.texts(n) for p in self.parts], n)


def _rows(keys: Sequence[Any], parts: Sequence[_Part], n: int) -> list[dict[Any, Any]]:
    """`n` new dicts, the i-th of each key's part's i-th value."""
    if not keys:
        return [{} for _ in range(n)]
    columns = [p.values(n) for p in parts]
    return [dict(zip(keys, row, strict=True)) for row in zip(*columns, strict=True)]


class _Mappings(_Part):
    """Dicts of varied keys: their keys and their values, each dict a run of them."""

    __slots__ = ("items", "names", "offsets")

    def __init__(self, offsets: np.ndarray, names: _Part, items: _Part) -> None:
        self.offsets, self.names, self.items = offsets, names, items

    def get(self, i: int) -> Any:
        names, values, at = self.names.get, self.items.get, self.offsets.item
        return {names(k): values(k) for k in range(at(i), at(i + 1))}

    def values(self, n: int) -> list[Any]:
        offsets = self.offsets.tolist()
        names, items = self.names.values(offsets[-1]), self.items.values(offsets[-1])
        return [
            dict(zip(names[a:b], items[a:b], strict=True)) for a, b in itertools.pairwise(offsets)
        ]


class _Records(_Part):
    """Dataclasses of one type: a part a field, each made again by its __init__."""

    __slots__ = ("kind", "names", "parts")

    def __init__(self, kind: type, names: tuple[str, ...], parts: list[_Part]) -> None:
        self.kind, self.names, self.parts = kind, names, parts

    def get(self, i: int) -> Any:
        return self.kind(**{n: p.get(i) for n, p in zip(self.names, self.parts, strict=True)})

    def values(self, n: int) -> list[Any]:
        return records(
            self.kind, dict(zip(self.names, (p.values(n) for p in self.parts), strict=True)), n
        )

    def plain(self, n: int) -> list[Any]:
        return _rows(self.names, self.parts, n)

    def texts(self, n: int) -> list[bytes]:
        return object_texts(self.names, [p.texts(n) for p in self.parts], n)


def record(kind: type[T], fields: Mapping[str, Any]) -> T:
    """One dataclass of `kind` from the values of its fields (a field not in `fields`
    takes its default), as `records` makes many, at a fifth of the cost of its __init__
    for a frozen dataclass of thirty fields: a diagnosis makes one a step."""
    names, required, defaults, factories = _shape(cast(type, kind))
    if not required <= fields.keys() <= names or hasattr(kind, "__post_init__"):
        return kind(**fields)  # its own checks (a missing or an unknown field)
    values = {**defaults, **{name: make() for name, make in factories}, **fields}
    made: T = object.__new__(kind)
    if hasattr(made, "__dict__"):
        made.__dict__.update(values)
    else:
        for name, value in values.items():
            object.__setattr__(made, name, value)
    return made


@functools.cache
def _shape(
    kind: type,
) -> tuple[frozenset[str], frozenset[str], dict[str, Any], tuple[tuple[str, Any], ...]]:
    """A dataclass's field names, those without a default, their defaults, and the
    factories of the others."""
    fields = dataclasses.fields(kind)
    defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
    factories = tuple(
        (f.name, f.default_factory) for f in fields if f.default_factory is not dataclasses.MISSING
    )
    names = frozenset(f.name for f in fields)
    return names, names - defaults.keys() - {n for n, _ in factories}, defaults, factories


def records(kind: type, columns: Mapping[str, Sequence[Any]], n: int) -> list[Any]:
    """`n` dataclasses of `kind` at once, from a column of values a field (a field not
    in `columns` takes its default): a long trace's steps make a million of them."""
    fields = dataclasses.fields(kind)
    values = [
        columns[f.name]
        if f.name in columns
        else [f.default] * n
        if f.default is not dataclasses.MISSING
        else [f.default_factory() for _ in range(n)]  # type: ignore[operator]
        for f in fields
    ]
    if any(len(column) != n for column in values):
        raise ValueError(f"{kind.__name__}: columns of other lengths than {n}")
    names = [f.name for f in fields]
    slots = [getattr(kind, name, None) for name in names]
    # What its __init__ would set, set straight (at a third of the cost): a dataclass
    # with no __post_init__ sets its fields and nothing else.
    if hasattr(kind, "__post_init__"):
        return [kind(**dict(zip(names, row, strict=True))) for row in zip(*values, strict=True)]
    made: list[Any] = [object.__new__(kind) for _ in range(n)]
    if not all(isinstance(s, types.MemberDescriptorType) for s in slots):
        for each, row in zip(made, zip(*values, strict=True), strict=True):
            each.__dict__.update(zip(names, row, strict=True))
        return made
    for slot, column in zip(slots, values, strict=True):
        collections.deque(map(slot.__set__, made, column), maxlen=0)  # type: ignore[union-attr]
    return made
