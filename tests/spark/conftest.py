"""One real Spark session (local[2]) per test worker; every Spark test runs in the "spark" group so
pytest-xdist puts them on one worker and the JVM starts once."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from deltaplane.spark_jobs.session import get_spark

    session = get_spark("local[2]", app_name="deltaplane-tests")
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
