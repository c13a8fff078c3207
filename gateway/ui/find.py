"""Find a job by id from the search box every page carries: a GET form, so it works without
JavaScript, answered with a redirect to the job's page or a 404 page naming what was sought."""

from __future__ import annotations

from flask import redirect, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from gateway.context import gateway
from gateway.ui.base import bp, render
from shared.jobs import JOB_ID_PATTERN

# The most of what was typed that the "no job" page repeats: an id is 36 characters.
SHOWN = 100


@bp.route("/find")
def find_job() -> BaseResponse | tuple[str, int]:
    """Go to the page of the job whose id was typed (303); 404 when there is no such job."""
    typed = request.args.get("id", "").strip()
    job_id = typed.lower()  # UUIDs are case-insensitive on input, as on the job's page
    # A malformed id cannot name a job: no Redis read for it.
    if (
        JOB_ID_PATTERN.fullmatch(job_id)
        and gateway().directory.locator.find_job(job_id) is not None
    ):
        return redirect(url_for("ui.job", job_id=job_id), code=303)
    shown = typed if len(typed) <= SHOWN else typed[: SHOWN - 1] + "…"
    return render("not_found.html", "error", status=404, sought=shown)
