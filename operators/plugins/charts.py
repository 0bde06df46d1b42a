"""Chart geometry for the ops view: titled bar and line charts with labelled axes, units and ticks.

The geometry is computed here (plain numbers and strings); ``templates/charts.html`` draws it as
SVG on the server, escaping every label like every other value. No script, no request leaves
the Airflow server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

Unit = Literal["count", "bytes", "percent"]
_BINARY = ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


@dataclass(frozen=True)
class Bar:
    value: float
    color: str
    tip: str  # the bar's tooltip: what a reader hovering it sees
    label: str | None = None  # the x tick label under it (None: no tick)
    sublabel: str | None = None  # a second line under the label (a time)


def size_label(n: float) -> str:
    """A byte count in binary units, short: ``512 B``, ``1 KiB``, ``1.5 MiB``."""
    n = float(n)
    for unit in _BINARY:
        if abs(n) < 1024 or unit == _BINARY[-1]:
            if unit == "B":
                return f"{n:.0f} B"
            return f"{n:.0f} {unit}" if n == int(n) else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def count_label(n: float) -> str:
    """A count, short: ``950``, ``12k``, ``3.4M``."""
    for div, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(n) >= div:
            value = n / div
            return f"{value:.0f}{suffix}" if value == int(value) else f"{value:.1f}{suffix}"
    return f"{n:.0f}" if n == int(n) else f"{n:.2g}"


def nice_ticks(top: float, unit: Unit = "count", target: int = 4) -> list[float]:
    """Tick values from 0 to at least ``top``: steps of 1, 2 or 5 times a power of ten (of the
    binary unit's size for bytes), about ``target`` of them. Counts get whole steps."""
    top = max(float(top), 1.0)
    scale = 1.0
    if unit == "bytes":
        while top / scale >= 1024 and scale < 1024.0 ** (len(_BINARY) - 1):
            scale *= 1024
    raw = top / scale / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if unit == "count" or scale == 1:
        step = max(step, 1.0)
    n = math.ceil(top / scale / step - 1e-9)
    return [i * step * scale for i in range(n + 1)]


def bar_chart(
    bars: list[Bar],
    *,
    title: str,
    x_label: str,
    y_label: str,
    unit: Unit = "count",
    width: int = 760,
    height: int = 200,
) -> dict:
    """The geometry of one chart: ``height`` is the plot area's; margins hold the title, the
    axis titles and the tick labels."""
    left, right, top_margin, bottom = 70, 12, 30, 54
    plot_w = width - left - right
    ticks = nice_ticks(max((b.value for b in bars), default=0), unit)
    y_max = ticks[-1] or 1
    fmt = size_label if unit == "bytes" else count_label
    n = max(len(bars), 1)
    slot = plot_w / n
    drawn = []
    for i, b in enumerate(bars):
        h = max(b.value, 0) / y_max * height
        x = left + i * slot
        drawn.append(
            {
                "x": f"{x + slot * 0.1:.1f}",
                "y": f"{top_margin + height - h:.1f}",
                "width": f"{max(slot * 0.8, 1):.1f}",
                "height": f"{h:.1f}",
                "color": b.color,
                "tip": b.tip,
                "label": b.label,
                "sublabel": b.sublabel,
                "label_x": f"{x + slot / 2:.1f}",
            }
        )
    return {
        "title": title,
        "x_label": x_label,
        "y_label": y_label,
        "width": width,
        "total_height": top_margin + height + bottom,
        "left": left,
        "right": width - right,
        "top": top_margin,
        "bottom": top_margin + height,
        "x_label_x": f"{left + plot_w / 2:.1f}",
        "x_label_y": top_margin + height + 46,
        "y_label_y": f"{top_margin + height / 2:.1f}",
        "tick_label_y": top_margin + height + 14,
        "y_ticks": [{"y": f"{top_margin + height - t / y_max * height:.1f}", "label": fmt(t)} for t in ticks],
        "bars": drawn,
        "empty": not bars,
    }


@dataclass(frozen=True)
class Marker:
    """A vertical line at point ``index`` of a line chart (a maintenance run), with its tip."""

    index: int
    tip: str


def line_chart(
    values: list[float | None],
    *,
    title: str,
    x_label: str,
    y_label: str,
    unit: Unit = "count",
    x_ticks: list[tuple[int, str, str | None]] = (),
    markers: list[Marker] = (),
    tips: list[str] | None = None,
    color: str = "#0072b2",
    width: int = 760,
    height: int = 140,
) -> dict:
    """One line over points evenly spaced on x (one per commit), ``None`` a gap; ``unit`` percent
    takes ratios (0.25 is 25%). ``x_ticks``: (index, label, second line); ``markers``: vertical
    lines (maintenance runs) with tips; ``tips``: one per point (shown on its dot)."""
    left, right, top_margin, bottom = 70, 12, 30, 54
    plot_w = width - left - right
    scale = 100.0 if unit == "percent" else 1.0
    shown = [None if v is None else max(float(v), 0.0) * scale for v in values]
    ticks = nice_ticks(
        max((v for v in shown if v is not None), default=0), "bytes" if unit == "bytes" else "count"
    )
    y_max = ticks[-1] or 1
    if unit == "bytes":
        fmt = size_label
    elif unit == "percent":
        fmt = lambda t: f"{t:g}%"  # noqa: E731
    else:
        fmt = count_label
    n = len(values)

    def x_of(i: int) -> float:
        return left + (plot_w * (i / (n - 1)) if n > 1 else plot_w / 2)

    def y_of(v: float) -> float:
        return top_margin + height - v / y_max * height

    segments, current = [], []
    dots = []
    for i, v in enumerate(shown):
        if v is None:
            if current:
                segments.append(" ".join(current))
            current = []
            continue
        current.append(f"{x_of(i):.1f},{y_of(v):.1f}")
        dots.append({"x": f"{x_of(i):.1f}", "y": f"{y_of(v):.1f}", "tip": (tips or [""] * n)[i]})
    if current:
        segments.append(" ".join(current))
    return {
        "title": title,
        "x_label": x_label,
        "y_label": y_label,
        "width": width,
        "total_height": top_margin + height + bottom,
        "left": left,
        "right": width - right,
        "top": top_margin,
        "bottom": top_margin + height,
        "x_label_x": f"{left + plot_w / 2:.1f}",
        "x_label_y": top_margin + height + 46,
        "y_label_y": f"{top_margin + height / 2:.1f}",
        "tick_label_y": top_margin + height + 14,
        "y_ticks": [{"y": f"{y_of(t):.1f}", "label": fmt(t)} for t in ticks],
        "x_ticks": [{"x": f"{x_of(i):.1f}", "label": label, "sublabel": sub} for i, label, sub in x_ticks],
        "lines": segments,
        "dots": dots if n <= 200 else [],
        "markers": [{"x": f"{x_of(m.index):.1f}", "tip": m.tip} for m in markers if 0 <= m.index < n],
        "color": color,
        "empty": not dots,
    }


def log_size_buckets(sizes: list[int]) -> list[dict]:
    """Files per power-of-two size bucket ``[2^k, 2^(k+1))``, from the smallest file's bucket
    to the largest's (empty buckets between kept, so the axis is a true log scale); empty files
    form a ``0 B`` bucket of their own."""
    if not sizes:
        return []
    counts: dict[int, int] = {}
    for s in sizes:
        k = -1 if s <= 0 else int(s).bit_length() - 1
        counts[k] = counts.get(k, 0) + 1
    positive = [k for k in counts if k >= 0]
    keys = [-1] if -1 in counts else []
    if positive:
        keys += range(min(positive), max(positive) + 1)
    return [
        {
            "min_bytes": 0 if k < 0 else 1 << k,
            "max_bytes": 0 if k < 0 else (1 << (k + 1)) - 1,
            "num_files": counts.get(k, 0),
        }
        for k in keys
    ]
