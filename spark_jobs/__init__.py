"""PySpark entry points: the engine plans, Spark rewrites files, the engine commits (coming with
the maintenance issues)."""
