"""Package layout: the repository's top-level folders install under one namespace.

``engine/`` is ``deltaplane.engine``, ``operators/`` is ``deltaplane.operators`` (the Airflow
provider), ``spark_jobs/`` is ``deltaplane.spark_jobs`` and ``devstack/`` (the demo and the native
stack launcher) is ``deltaplane.devstack``. ``deltaplane`` itself is a namespace package: nothing
generic (``engine``, ``operators``) lands at the top of ``sys.path`` beside a team's own packages.

Every folder under them is a package, data folders included (the ops view's ``templates/`` and
``static/``, whose files pyproject.toml's package-data names): setuptools treats a folder Python
could import but ``packages`` leaves out as a mistake ("Package would be ignored").
Everything else is declared in pyproject.toml.
"""

from setuptools import find_namespace_packages, setup

FOLDERS = ("engine", "operators", "spark_jobs", "devstack")

setup(
    package_dir={f"deltaplane.{folder}": folder for folder in FOLDERS},
    packages=[
        f"deltaplane.{package}"
        for package in find_namespace_packages(
            include=[f"{folder}*" for folder in FOLDERS], exclude=["*__pycache__*"]
        )
    ],
)
