"""Human-readable numbers with units: SI prefixes for rates and times, binary for sizes."""

from __future__ import annotations

import math
import re

_SI = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def si(value: float, unit: str, digits: int = 3) -> str:
    """`value` with an SI prefix: si(1.5e12, 'FLOP/s') == '1.50 TFLOP/s'."""
    if value is None or not math.isfinite(value):
        return "—" if value is None or math.isnan(value) else "∞"
    for scale, prefix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}".replace("e+", "e")
    return f"{value:.{digits}g} {unit}"


def flops_rate(flops_per_s: float) -> str:
    return si(flops_per_s, "FLOP/s")


def byte_rate(bytes_per_s: float) -> str:
    return si(bytes_per_s, "B/s")


def count(n: float, unit: str = "") -> str:
    """A count with an SI prefix (FLOPs, parameters)."""
    return si(n, unit).rstrip()


def seconds(value_s: float) -> str:
    """A duration in the most readable of s, ms, µs, ns."""
    if value_s is None or not math.isfinite(value_s):
        return "—"
    magnitude = abs(value_s)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if magnitude >= scale:
            return f"{value_s / scale:.3g} {unit}"
    return f"{value_s / 1e-9:.3g} ns"


def size(n_bytes: float | None) -> str:
    """A size in bytes with a binary prefix: size(85899345920) == '80 GiB'."""
    if n_bytes is None:
        return "—"
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.4g} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


_SIZE = re.compile(
    r"\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[KMGT]i?B|[KMGT]|B)?\s*", re.IGNORECASE
)
_SIZE_FACTORS = {"": 1, "B": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(text: str) -> int:
    """Bytes that `text` names: "1048576", "512 KiB", "40MiB", "1.5 GiB" (binary), "40 MB"
    or "2 GB" (decimal), "40M" (binary). Raises ConfigError for anything else."""
    from lightspeed.errors import ConfigError

    found = _SIZE.fullmatch(text)
    if found is None:
        raise ConfigError(
            f"{text!r} is not a size: give bytes, or a number with KiB, MiB, GiB (or KB, MB,"
            " GB), as in 40MiB."
        )
    unit = (found["unit"] or "").upper()
    prefix = unit[:1] if unit not in ("", "B") else ""
    if unit.endswith("B") and not unit.endswith("IB") and prefix:
        factor = 1000 ** ("KMGT".index(prefix) + 1)
    else:
        factor = _SIZE_FACTORS[prefix]
    return int(float(found["number"]) * factor)


_DURATION = re.compile(r"\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>us|µs|ms|s|min)?\s*")
_DURATION_FACTORS = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0}


def parse_duration(text: str, default_unit: str = "ms") -> float:
    """Seconds that `text` names: "50ms", "0.05 s", "200us", "2min"; a bare number is in
    `default_unit`. Raises ConfigError for anything else or for zero."""
    from lightspeed.errors import ConfigError

    found = _DURATION.fullmatch(text)
    if found is None or float(found["number"]) == 0:
        raise ConfigError(
            f"{text!r} is not a positive duration: give a number with ms, s or us, as in 50ms."
        )
    return float(found["number"]) * _DURATION_FACTORS[found["unit"] or default_unit]


def percent(fraction: float) -> str:
    """`fraction` as a percentage to one decimal: percent(0.123) == '12.3%'."""
    text = f"{100 * fraction:.1f}"
    # A share that rounds to zero reads 0.0%, whatever the sign its float subtraction left.
    return f"{'0.0' if float(text) == 0 else text}%"


def plural(n: int, word: str, words: str | None = None) -> str:
    """`n word` or `n words`: "1 sync", "3 syncs" (`words` when the plural is not +s)."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def a_kind(value: object) -> str:
    """What `value` is, with its article: "an int", "a str", "a NoneType"."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
