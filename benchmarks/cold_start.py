"""Cold start: what a fresh process pays before it does any work, deltaplane vs delta-rs.

Every CLI call, Airflow task and Spark Python worker is a new process that imports the engine.
An Airflow task also loads every installed plugin before it runs (its macros and listeners),
deltaplane's included.
Each case below runs in a fresh interpreter (``python -c``), timed from spawn to exit; the cases
are interleaved and each is reported as the median of ``--repeat`` runs. The floor is a process
that imports pyarrow (and with it NumPy). A process that builds one Arrow array from Python
objects pays pandas on top (pyarrow imports it, when installed, on the first such conversion):
deltaplane's open and one-file read convert through ``pyarrow.json`` and buffers instead
(``deltaplane.engine.values_to_arrow``). Each process ends with ``os._exit(0)``
once its work is done, so teardown is not timed: delta-rs's pyarrow reader aborts at interpreter
exit here ("terminate called without an active exception", pyarrow 26).

    python benchmarks/cold_start.py [--repeat 7]

Prints a table and writes ``benchmarks/results/cold_start.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

OURS = "from deltaplane.engine import DeltaTable"
THEIRS = "from deltalake import DeltaTable"
CASES = {
    "python (nothing imported)": "pass",
    "floor: import pyarrow": "import pyarrow",
    "import pyarrow, build one array from a list (loads pandas)": "import pyarrow as pa; pa.array([1])",
    "deltaplane: import DeltaTable": OURS,
    "delta-rs: import DeltaTable": THEIRS,
    "deltaplane: import + open + version": OURS + "; DeltaTable({t!r}).version()",
    "delta-rs: import + open + version": THEIRS + "; DeltaTable({t!r}).version()",
    "deltaplane: import + open + read": OURS + "; DeltaTable({t!r}).to_arrow()",
    "delta-rs: import + open + read": THEIRS + "; DeltaTable({t!r}).to_pyarrow_table()",
    "deltaplane CLI: --version": "import sys; sys.argv = ['deltaplane', '--version']\n"
    "from deltaplane.engine.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass",
    "deltaplane CLI: describe the table": "import sys; sys.argv = ['deltaplane', 'describe', {t!r}]\n"
    "from deltaplane.engine.cli import main\ntry:\n    main()\nexcept SystemExit:\n    pass",
    "Airflow task: import the operator, open the table": "import deltaplane.operators.operators.commit; "
    + OURS
    + "; DeltaTable({t!r}).version()",
    "Airflow task start: load the plugins, as the task runner does": "from airflow.sdk.plugins_manager "
    "import integrate_macros_plugins; integrate_macros_plugins()",
    "Spark Python worker: import the native read path": "import deltaplane.spark_jobs.native",
}


def run_once(code: str) -> float:
    started = time.perf_counter()
    code = f"{code}\nimport os\nos._exit(0)"
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=120)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    import pyarrow as pa

    from deltaplane.engine import write_table

    with tempfile.TemporaryDirectory(prefix="cold-start-") as root:
        table = str(Path(root) / "t")
        write_table(
            table, pa.table({"id": pa.array(range(1000), pa.int64()), "v": [str(i) for i in range(1000)]})
        )
        codes = {name: code.format(t=table) for name, code in CASES.items()}
        for code in codes.values():
            run_once(code)  # warm the file cache
        times: dict[str, list[float]] = {name: [] for name in codes}
        for _ in range(args.repeat):
            for name, code in codes.items():
                times[name].append(run_once(code))
    medians = {name: statistics.median(values) for name, values in times.items()}
    width = max(map(len, medians))
    print(f"{'case':<{width}}  median s  (of {args.repeat}, interleaved)")
    for name, value in medians.items():
        print(f"{name:<{width}}  {value:8.3f}")
    for what in ("import DeltaTable", "import + open + version", "import + open + read"):
        ours, theirs = medians[f"deltaplane: {what}"], medians[f"delta-rs: {what}"]
        print(f"ratio deltaplane / delta-rs, {what}: {ours / theirs:.2f}x")
    out = HERE / "results" / "cold_start.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"repeat": args.repeat, "median_seconds": medians, "runs": times}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
