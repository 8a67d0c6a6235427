"""The Dagster job that starts the commander's process (``incview_dagster.commander_job``).

The supervisor sensor requests a run of ``incview_commander`` whenever the commander's process
is not alive (``build_supervisor_sensor(..., commander_job=...)``); the run's one op starts it,
detached, through ``IncViewResource.start_commander`` and ends: like the views' streaming jobs,
the process outlives the run.
"""

from dagster import JobDefinition, OpExecutionContext, job, op

from incview_dagster.resource import IncViewResource

COMMANDER_DAGSTER_JOB = "incview_commander"


def build_commander_job() -> JobDefinition:
    """The job ``incview_commander`` (one op, resource key ``incview``)."""

    @op(
        name="start_incview_commander",
        description="Starts the process that answers CALL incview.create_view/drop_view/explain "
        "(unless it runs).",
    )
    def _start(context: OpExecutionContext, incview: IncViewResource) -> None:
        status = incview.start_commander()
        context.log.info(f"the incview commander runs: pid {status.pid}, log {status.log_path}")

    @job(
        name=COMMANDER_DAGSTER_JOB,
        description="Starts incview's commander: views created in SQL (CALL incview.create_view).",
    )
    def _commander() -> None:
        _start()

    return _commander
