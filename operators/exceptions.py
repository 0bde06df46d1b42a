"""The provider's exception types. Each says whether Airflow retries the task: an
``AirflowFailException`` fails it at once (the same input would fail the same way), an
``AirflowException`` is retried."""

from __future__ import annotations

from airflow.sdk.exceptions import AirflowException, AirflowFailException, AirflowSensorTimeout


class SparkJobError(AirflowException):
    """A Spark job exited with an error: its exit code, error name and message are in the text
    (and in ``returncode``, ``error``, ``job_message``). Airflow retries it."""

    def __init__(
        self,
        message: str,
        *,
        job: str = "",
        returncode: int | None = None,
        error: str | None = None,
        job_message: str | None = None,
    ):
        super().__init__(message)
        self.job = job
        self.returncode = returncode
        self.error = error
        self.job_message = job_message


class SparkJobInputError(SparkJobError, AirflowFailException):
    """A Spark job refused its input or command line (exit codes 2 and 3): the task fails
    without retries, since the same input would fail the same way."""


class BatchRejected(AirflowFailException):
    """The landing batch cannot be staged as rows of the table (it was quarantined). An
    ``AirflowFailException``: the task fails at once, a retry cannot make the files good."""


class QualityGateFailed(AirflowFailException):
    """The staged batch was rejected (quarantined, nothing committed); fails without retries."""


class DeltaTriggerError(AirflowException):
    """A trigger watching a table reported an error event (``{"status": "error", "message"}``:
    the table or its storage failed, or the table disappeared, while the task was deferred).
    Retried: storage errors are usually transient."""


class DeltaTriggerTimeout(AirflowSensorTimeout):
    """A deferred sensor's ``timeout`` passed before its condition held (the trigger's
    ``{"status": "timeout"}`` event). A sensor timeout: no retries, ``soft_fail`` skips."""
