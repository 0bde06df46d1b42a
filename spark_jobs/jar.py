"""deltaplane's Spark classes (``spark_jobs/java``), compiled once per PySpark version.

They give a native read a file index from the log (no listing) and a Parquet format that applies
deletion vectors while it decodes. ``get_spark`` puts the jar on a session's classpath when it
starts the JVM (``spark.jars``; a jar added to a running session reaches only the thread that
added it); ``path()`` gives it for ``spark-submit --jars``. Where it cannot be built (no ``javac``)
or loaded (Spark Connect, a JVM started without it), reads take the expression path instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import weakref
import zipfile
from functools import cache
from pathlib import Path

log = logging.getLogger(__name__)

SOURCES = Path(__file__).with_name("java")
ENTRY = "io.deltaplane.spark.NativeScan"
_BUILD_SECONDS = 300


def _spark_jars() -> Path | None:
    try:
        import pyspark
    except ImportError:
        return None
    for candidate in (
        Path(pyspark.__file__).parent / "jars",
        Path(os.environ.get("SPARK_HOME", "/nonexistent")) / "jars",
    ):
        if candidate.is_dir():
            return candidate
    return None


def _cache_dir() -> Path:
    if os.environ.get("DELTAPLANE_CACHE_DIR"):
        return Path(os.environ["DELTAPLANE_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "deltaplane"


def _javac() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "javac").is_file():
        return str(Path(home) / "bin" / "javac")
    return shutil.which("javac")


def _sources() -> list[Path]:
    return sorted(SOURCES.rglob("*.java"))


@cache
def path() -> Path | None:
    """The jar for the installed PySpark, built on first use into the cache directory
    (``$DELTAPLANE_CACHE_DIR``, else ``~/.cache/deltaplane``); None, with the reason logged,
    where it cannot be built."""
    try:
        reason, jar = _build()
    except (OSError, subprocess.SubprocessError) as e:  # a cache folder it cannot write, a hung javac
        reason, jar = f"building it failed: {e}", None
    if reason:
        log.warning(
            "deltaplane's Spark classes are unavailable (%s): native reads use Spark expressions", reason
        )
    return jar


def _build() -> tuple[str | None, Path | None]:
    import pyspark

    jars = _spark_jars()
    if jars is None:
        return "PySpark's jars were not found", None
    digest = hashlib.sha256()
    for source in _sources():
        digest.update(source.relative_to(SOURCES).as_posix().encode() + b"\0" + source.read_bytes())
    jar = _cache_dir() / f"deltaplane-spark-{pyspark.__version__}-{digest.hexdigest()[:16]}.jar"
    if jar.is_file():
        return None, jar
    javac = _javac()
    if javac is None:
        return "no javac on PATH or under JAVA_HOME", None
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent, prefix=".build-") as work:
        classes = Path(work) / "classes"
        command = [javac, "--release", "17", "-nowarn", "-cp", str(jars / "*"), "-d", str(classes)]
        done = subprocess.run(
            [*command, *map(str, _sources())], capture_output=True, text=True, timeout=_BUILD_SECONDS
        )
        if done.returncode != 0:
            return f"javac failed against PySpark {pyspark.__version__}: {done.stderr.strip()[-2000:]}", None
        partial = Path(work) / "out.jar"
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as out:
            out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: deltaplane\r\n\r\n")
            for cls in sorted(classes.rglob("*.class")):
                out.write(cls, cls.relative_to(classes).as_posix())
        os.replace(partial, jar)  # whole or not at all, whoever builds it at the same time
    return None, jar


# Sessions asked already: a JVM's classpath does not change once it has started.
_LOADED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def loaded(spark) -> bool:
    """Whether ``spark`` is a classic session whose JVM can load deltaplane's classes."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None or getattr(spark, "_jsparkSession", None) is None:
        return False
    try:
        return _LOADED[spark]
    except (KeyError, TypeError):
        pass
    try:
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(ENTRY, False, loader)
        found = True
    except Exception:
        found = False
    with contextlib.suppress(TypeError):  # a session that cannot be weakly referenced: asked each time
        _LOADED[spark] = found
    return found


__all__ = ["ENTRY", "loaded", "path"]
