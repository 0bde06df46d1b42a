"""Incremental liquid clustering: which files an OPTIMIZE of a clustered table rewrites.

Delta Spark's rules (``ClusteringStrategy``), so that both engines agree on what is finished:

* Every OPTIMIZE bin becomes one **ZCube**: its output files carry ``clusteringProvider:
  "liquid"`` and the tags ``ZCUBE_ID`` (one id per bin) and ``ZCUBE_ZORDER_BY`` (the logical
  clustering columns, a JSON list).
* Candidates are the unclustered files (no ``clusteringProvider``) and the files of ZCubes of the
  current clustering columns that are still smaller than ``min_cube_size``: a cube that big is
  finished and never rewritten again, so the work of an OPTIMIZE follows the new data, not the
  table's size. Files of another clustering implementation are left alone; files clustered by
  other (older) columns are left alone too unless ``full`` (``OPTIMIZE FULL``).
* Nothing new and one small cube left: nothing to do, so a second OPTIMIZE commits nothing.
* Candidates, unclustered first and then cube by cube, are packed in order into bins of at most
  ``max_bin_size`` bytes; each bin is clustered as a whole (even a single file).

The cube of a clustered file is read from its tags in the live-file table, which keeps them
through checkpoints and log cleanup. A clustered file without them (written by a tool that did
not tag it) counts as one cube per commit, clustered by the current columns.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.clustering import PROVIDER, ZCUBE_COLUMNS_TAG, ZCUBE_ID_TAG
from deltaplane.engine.packing import next_fit

GiB = 1 << 30
# Delta Spark's defaults are 100 GiB (minCubeSize.threshold) and 150 GiB (targetCubeSize): a
# whole cube is sorted at once, here in one process's memory, hence smaller ones.
DEFAULT_MIN_CUBE_SIZE = 2 * GiB
MAX_BIN_FACTOR = 1.5  # Delta Spark's target cube size over its minimum


def select_bins(
    files: pa.Table,
    columns: Sequence[str],
    *,
    min_cube_size: int,
    max_bin_size: int,
    full: bool = False,
) -> list[list[int]]:
    """Row indices of ``files`` grouped into the bins to cluster (see the module docstring)."""
    sizes = files.column("size").to_pylist()
    providers = files.column("clustering_provider").to_pylist()
    versions = files.column("version").to_pylist()
    cube_ids = _tag(files, ZCUBE_ID_TAG)
    cube_columns = _tag(files, ZCUBE_COLUMNS_TAG)
    current = list(columns)
    unclustered: list[int] = []
    cubes: dict[str, list[int]] = {}
    stale: list[int] = []
    for i, provider in enumerate(providers):
        if provider is None:
            unclustered.append(i)
            continue
        if provider != PROVIDER:
            continue  # another clustering implementation's layout
        cube, by = cube_ids[i], _columns(cube_columns[i])
        if cube is None or by is None:
            cube, by = f"deltaplane:commit:{versions[i]}", current
        if by != current:
            if full:
                stale.append(i)
            continue
        cubes.setdefault(cube, []).append(i)
    small = {k: v for k, v in cubes.items() if sum(sizes[i] for i in v) < min_cube_size}
    if not unclustered and not stale and len(small) <= 1:
        return []
    ordered = unclustered + [i for k in sorted(small) for i in small[k]] + stale
    return next_fit(ordered, sizes, max_bin_size)


def _tag(files: pa.Table, key: str) -> list[str | None]:
    """Each file's value of tag ``key`` (``None`` where it has none)."""
    if "tags" not in files.column_names:
        return [None] * files.num_rows
    tags = files.column("tags")
    if tags.null_count == len(tags):
        return [None] * files.num_rows
    return pc.map_lookup(tags, pa.scalar(key), "first").to_pylist()


def _columns(value: str | None) -> list[str] | None:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return [str(c) for c in parsed] if isinstance(parsed, list) else None
