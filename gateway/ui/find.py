"""Find a job by id from the search box every page carries: a GET form, so it works without
JavaScript, answered with a redirect to the job's page or a 404 page naming what was sought.

People paste what they have: the id, a job's URL or path (``/jobs/<id>``, ``/ui/jobs/<id>``),
a line of JSON (``"id": "<id>"``). Whatever it is, the one job id it holds is sought; text
holding none, or two different ones, names no job.
"""

from __future__ import annotations

import re

from flask import redirect, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from gateway.context import gateway
from gateway.ui.ui_base import bp, render
from shared.model.jobs import JOB_ID_PATTERN

# The most of what was typed that the "no job" page repeats: an id is 36 characters.
SHOWN = 100
# A job id standing alone: no hex digit or hyphen right before or after it (so no longer run of
# hex digits is cut down to one).
_ID_IN_TEXT = re.compile(rf"(?<![0-9a-f-])({JOB_ID_PATTERN.pattern})(?![0-9a-f-])")


@bp.route("/find")
def find_job() -> BaseResponse | tuple[str, int]:
    """Go to the page of the job whose id was typed (303); 404 when there is no such job."""
    typed = request.args.get("id", "").strip()
    job_id = job_id_in(typed)
    # Text with no well-formed id cannot name a job: no Redis read for it.
    if job_id is not None and gateway().directory.locator.find_job(job_id) is not None:
        return redirect(url_for("ui.job", job_id=job_id), code=303)
    shown = typed if len(typed) <= SHOWN else typed[: SHOWN - 1] + "…"
    return render("not_found.html", "error", status=404, sought=shown)


def job_id_in(typed: str) -> str | None:
    """Return the one job id `typed` holds (any case: UUIDs are case-insensitive on input, as
    on the job's page), None if it holds none or several different ones."""
    found = set(_ID_IN_TEXT.findall(typed.lower()))
    return found.pop() if len(found) == 1 else None
