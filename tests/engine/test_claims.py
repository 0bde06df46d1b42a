"""Landing files claimed by a batch: each file goes to exactly one batch even when runs race, a
try interrupted after claiming finds its files again, and moving them on (committed) or back
(not committed) can be repeated after a crash."""

from __future__ import annotations

import threading
from pathlib import Path

from deltaplane.engine.quarantine import claim_files, finish_claimed, home_path, release_claimed
from tests.workers import run_in_threads


def land(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(n):
        path = folder / f"f{i:03d}.csv"
        path.write_text(f"id\n{i}\n")
        files.append(path)
    return files


def test_racing_claims_give_each_file_to_exactly_one_batch(tmp_path):
    files = land(tmp_path / "landing", 200)
    got: dict[str, list[Path]] = {}
    start = threading.Barrier(4)

    def claim(batch: str) -> None:
        start.wait()
        got[batch] = claim_files(files, batch)

    run_in_threads(claim, (f"run{i}" for i in range(4)))
    names = [p.name for claimed in got.values() for p in claimed]
    assert sorted(names) == sorted(f.name for f in files)  # every file once, none twice
    for batch, claimed in got.items():
        assert all(p.parent == tmp_path / "landing" / "_staged" / batch for p in claimed)


def test_a_try_interrupted_after_claiming_finds_its_files_again(tmp_path):
    files = land(tmp_path / "landing", 3)
    first = claim_files(files[:2], "b1")  # the try died here, before its manifest
    late = land(tmp_path / "landing", 3)[2:]  # f002 is still in the landing folder
    again = claim_files(late, "b1")
    assert [p.name for p in again] == ["f000.csv", "f001.csv", "f002.csv"]
    assert set(first) <= set(again)
    assert [home_path(p) for p in again] == files


def test_finish_and_release_can_be_repeated(tmp_path):
    files = land(tmp_path / "landing", 2)
    claimed = [str(p) for p in claim_files(files, "b1")]
    done = finish_claimed(claimed, "b1")
    assert done == finish_claimed(claimed, "b1")  # a retry after a crash: the same places
    processed = tmp_path / "landing" / "_processed" / "b1"
    assert sorted(p.name for p in processed.iterdir()) == ["f000.csv", "f001.csv"]
    assert not (tmp_path / "landing" / "_staged" / "b1").exists()

    files = land(tmp_path / "other", 2)
    claimed = [str(p) for p in claim_files(files, "b2")]
    (tmp_path / "other" / "f001.csv").write_text("id\n99\n")  # a newer delivery of one name
    returned, kept = release_claimed(claimed)
    assert returned == [str(files[0])] and kept == [claimed[1]]
    assert (tmp_path / "other" / "f001.csv").read_text() == "id\n99\n"  # never overwritten
    assert release_claimed(claimed) == ([], [claimed[1]])  # again: nothing more to do
