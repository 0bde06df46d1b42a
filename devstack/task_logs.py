"""Task logs of ``dag.test()`` runs, written where Airflow's UI reads them.

Airflow's task runner has its supervisor write each task's log, as JSON lines, to
``<[logging] base_log_folder>/<log_filename_template>`` (``dag_id=.../run_id=.../task_id=.../
attempt=N.log``), the file the UI's log reader opens. ``dag.test()`` runs the tasks in its own
process instead, and their lines go wherever that process's logging goes. :func:`task_log_files`
gives such runs the same files: a listener on Airflow's task-instance hooks opens a task's file
when it starts running and closes it when it finishes, and Airflow's logging (structlog and the
standard library's, as JSON lines like the runner's) is written to the open file, everything
logged outside a task to ``other``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import BinaryIO

from airflow.listeners import hookimpl


class _Destination:
    """A binary stream for Airflow's log output: the running task's log file, else ``other``."""

    def __init__(self, other: BinaryIO):
        self.other = other
        self.task_file: BinaryIO | None = None

    def write(self, data: bytes) -> int:
        target = self.task_file or self.other
        written = target.write(data)
        target.flush()
        return written

    def flush(self) -> None:
        (self.task_file or self.other).flush()

    def open_task(self, relative_path: str) -> None:
        from airflow.sdk.log import init_log_file

        self.close_task()
        # append: a task resumed after a deferral, or rerun in the same try, keeps its earlier lines
        self.task_file = init_log_file(relative_path).open("ab")

    def close_task(self) -> None:
        if self.task_file is not None:
            self.task_file.close()
            self.task_file = None


class _TaskListener:
    """Airflow listener hooks (``on_task_instance_*``) switching the destination per task."""

    def __init__(self, destination: _Destination):
        from airflow.utils.helpers import log_filename_template_renderer

        self._destination = destination
        self._render = log_filename_template_renderer()  # the path the UI's reader renders

    @hookimpl
    def on_task_instance_running(self, previous_state, task_instance):
        self._destination.open_task(self._render(ti=task_instance))

    @hookimpl
    def on_task_instance_success(self, previous_state, task_instance):
        self._destination.close_task()

    @hookimpl
    def on_task_instance_failed(self, previous_state, task_instance, error):
        self._destination.close_task()

    @hookimpl
    def on_task_instance_skipped(self, previous_state, task_instance):
        self._destination.close_task()


@contextlib.contextmanager
def task_log_files(other: BinaryIO) -> Iterator[None]:
    """Within the block, the tasks ``dag.test()`` runs in this process log to their own files
    under ``$AIRFLOW_HOME``'s log folder; whatever is logged outside a task goes to ``other``."""
    from airflow.sdk.listener import get_listener_manager
    from airflow.sdk.log import configure_logging

    destination = _Destination(other)
    listener = _TaskListener(destination)
    configure_logging(json_output=True, output=destination, cache_logger_on_first_use=False)
    manager = get_listener_manager()
    manager.add_listener(listener)
    try:
        yield
    finally:
        manager.pm.unregister(listener)
        destination.close_task()
