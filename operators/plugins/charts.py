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


LEFT, RIGHT, TOP, BOTTOM = 70, 12, 30, 54  # margins: the y ticks, the title, the x ticks and title


@dataclass(frozen=True)
class _Frame:
    """The plot area of a chart and its y scale: what a bar chart and a line chart share."""

    width: int
    height: int
    y_max: float

    @property
    def plot_width(self) -> float:
        return self.width - LEFT - RIGHT

    def y(self, value: float) -> float:
        return TOP + self.height - value / self.y_max * self.height

    def geometry(self, title: str, x_label: str, y_label: str, ticks: list[float], fmt) -> dict:
        """The chart's frame as ``charts.html`` draws it: title, axes, their titles and y ticks."""
        return {
            "title": title,
            "x_label": x_label,
            "y_label": y_label,
            "width": self.width,
            "total_height": TOP + self.height + BOTTOM,
            "left": LEFT,
            "right": self.width - RIGHT,
            "top": TOP,
            "bottom": TOP + self.height,
            "x_label_x": f"{LEFT + self.plot_width / 2:.1f}",
            "x_label_y": TOP + self.height + 46,
            "y_label_y": f"{TOP + self.height / 2:.1f}",
            "tick_label_y": TOP + self.height + 14,
            "y_ticks": [{"y": f"{self.y(t):.1f}", "label": fmt(t)} for t in ticks],
        }


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
    ticks = nice_ticks(max((b.value for b in bars), default=0), unit)
    frame = _Frame(width, height, ticks[-1] or 1)
    fmt = size_label if unit == "bytes" else count_label
    slot = frame.plot_width / max(len(bars), 1)
    drawn = []
    for i, b in enumerate(bars):
        h = max(b.value, 0) / frame.y_max * height
        x = LEFT + i * slot
        drawn.append(
            {
                "x": f"{x + slot * 0.1:.1f}",
                "y": f"{frame.y(max(b.value, 0)):.1f}",
                "width": f"{max(slot * 0.8, 1):.1f}",
                "height": f"{h:.1f}",
                "color": b.color,
                "tip": b.tip,
                "label": b.label,
                "sublabel": b.sublabel,
                "label_x": f"{x + slot / 2:.1f}",
            }
        )
    return {**frame.geometry(title, x_label, y_label, ticks, fmt), "bars": drawn, "empty": not bars}


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
    scale = 100.0 if unit == "percent" else 1.0
    shown = [None if v is None else max(float(v), 0.0) * scale for v in values]
    ticks = nice_ticks(
        max((v for v in shown if v is not None), default=0), "bytes" if unit == "bytes" else "count"
    )
    frame = _Frame(width, height, ticks[-1] or 1)
    if unit == "bytes":
        fmt = size_label
    elif unit == "percent":
        fmt = lambda t: f"{t:g}%"  # noqa: E731
    else:
        fmt = count_label
    n = len(values)

    def x_of(i: int) -> float:
        return LEFT + (frame.plot_width * (i / (n - 1)) if n > 1 else frame.plot_width / 2)

    segments, current = [], []
    dots = []
    for i, v in enumerate(shown):
        if v is None:
            if current:
                segments.append(" ".join(current))
            current = []
            continue
        current.append(f"{x_of(i):.1f},{frame.y(v):.1f}")
        dots.append({"x": f"{x_of(i):.1f}", "y": f"{frame.y(v):.1f}", "tip": (tips or [""] * n)[i]})
    if current:
        segments.append(" ".join(current))
    return {
        **frame.geometry(title, x_label, y_label, ticks, fmt),
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
