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

Tags are not kept in the live-file table, so they are read back from the commits that added the
clustered files (one small JSON read per such commit). When that commit is gone (log cleanup),
or it carried no tags (a row-level change re-adding a file with a deletion vector), the files
count as one cube per commit, clustered by the current columns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc

from deltaplane.engine.clustering import PROVIDER, ZCUBE_COLUMNS_TAG, ZCUBE_ID_TAG
from deltaplane.engine.errors import ObjectNotFoundError
from deltaplane.engine.log.files import commit_key
from deltaplane.engine.storage.base import ObjectStore

GiB = 1 << 30
# Delta Spark's defaults are 100 GiB (minCubeSize.threshold) and 150 GiB (targetCubeSize): a
# whole cube is sorted at once, here in one process's memory, hence smaller ones.
DEFAULT_MIN_CUBE_SIZE = 2 * GiB
MAX_BIN_FACTOR = 1.5  # Delta Spark's target cube size over its minimum


def cube_tags(store: ObjectStore, files: pa.Table) -> dict[str, dict[str, str]]:
    """The tags of every clustered file of ``files`` (by path as the log names it), read from the
    commits that added them; files whose commit is gone are missing from the answer."""
    providers = files.column("clustering_provider")
    if providers.null_count == len(providers):
        return {}
    clustered = files.filter(pc.is_valid(providers))
    versions = sorted(set(clustered.column("version").to_pylist()))
    wanted = set(clustered.column("path").to_pylist())

    def read(version: int) -> dict[str, dict[str, str]]:
        try:
            data = store.get(commit_key(version))
        except ObjectNotFoundError:
            return {}
        out = {}
        for line in data.splitlines():
            if not line.startswith(b'{"add"') or b"ZCUBE" not in line:
                continue
            add = json.loads(line)["add"]
            if add.get("path") in wanted and isinstance(add.get("tags"), dict):
                out[add["path"]] = {str(k): str(v) for k, v in add["tags"].items() if v is not None}
        return out

    tags: dict[str, dict[str, str]] = {}
    workers = min(8, len(versions)) if store.remote else 1
    with ThreadPoolExecutor(max(1, workers), thread_name_prefix="deltaplane-liquid") as pool:
        for found in pool.map(read, versions):
            tags.update(found)
    return tags


def select_bins(
    files: pa.Table,
    tags: Mapping[str, Mapping[str, str]],
    columns: Sequence[str],
    *,
    min_cube_size: int,
    max_bin_size: int,
    full: bool = False,
) -> list[list[int]]:
    """Row indices of ``files`` grouped into the bins to cluster (see the module docstring)."""
    paths = files.column("path").to_pylist()
    sizes = files.column("size").to_pylist()
    providers = files.column("clustering_provider").to_pylist()
    versions = files.column("version").to_pylist()
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
        t = tags.get(paths[i]) or {}
        cube, by = t.get(ZCUBE_ID_TAG), _columns(t.get(ZCUBE_COLUMNS_TAG))
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
    bins: list[list[int]] = []
    current_bin: list[int] = []
    current_size = 0
    for i in ordered:
        if current_bin and current_size + sizes[i] > max_bin_size:
            bins.append(current_bin)
            current_bin, current_size = [], 0
        current_bin.append(i)
        current_size += sizes[i]
    if current_bin:
        bins.append(current_bin)
    return bins


def _columns(value: str | None) -> list[str] | None:
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError:
        return None
    return [str(c) for c in parsed] if isinstance(parsed, list) else None
