"""Where a benchmark's figures go: one JSON file (its folder made if need be), which the docs and
the README quote; and the machine they were measured on, which goes with them."""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def command_line(description: str, name: str) -> argparse.ArgumentParser:
    """A benchmark's argument parser: ``description`` (its docstring, laid out as written) and
    ``--out``, where its figures go (``results/<name>.json`` unless told)."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", default=str(RESULTS / f"{name}.json"), help="where to write the figures (JSON)"
    )
    return parser


def int_list(text: str) -> list[int]:
    """An argument such as ``1000,10000,30000``."""
    return [int(x) for x in text.split(",")]


def sized(args: argparse.Namespace, quick: dict, full: dict) -> argparse.Namespace:
    """``args`` with every size it leaves unset taken from ``quick`` under ``--quick``, else from
    ``full``."""
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def full_run_out(args: argparse.Namespace, name: str) -> str | None:
    """Where a benchmark with ``--quick`` and ``--only`` writes its figures: where ``--out`` says;
    unless told, a full run (neither) to ``results/<name>.json``, a quick or partial one nowhere."""
    if args.out is None and not args.quick and not args.only:
        return str(RESULTS / f"{name}.json")
    return args.out


def write_results(path: str | os.PathLike, results: dict) -> None:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=str))


def machine(**versions) -> dict:
    """The machine a benchmark measures on: its CPUs (how many, which model), memory, platform,
    Python and pyarrow, ``versions`` (of what the benchmark measures beside deltaplane) and the
    load average at the start."""
    import pyarrow as pa

    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": model,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyarrow": pa.__version__,
        **versions,
        "load_average_at_start": os.getloadavg(),
    }
