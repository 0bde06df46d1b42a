"""Airflow hooks, operators, sensors and triggers: thin wrappers over ``engine`` (coming with the
Airflow issues)."""
