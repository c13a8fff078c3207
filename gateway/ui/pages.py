"""The overview, queues and workers pages, and their actions (pause, resume, delete, quiet)."""

from __future__ import annotations

from flask import flash, redirect, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from gateway.actions import fleet_actions as fleet
from gateway.actions import queue_actions
from gateway.actions.action_errors import NotFound, QueueInUse
from gateway.context import gateway
from gateway.queue_page import SEARCH_MAX
from gateway.ui.chart import throughput_chart
from gateway.ui.job_pages import confirm_page, confirmed
from gateway.ui.ui_base import UiError, asked_by, bp, live_page, render
from shared.engine.limits import read_state
from shared.engine.queries import QueueCounts
from shared.model.jobs import JobState
from shared.model.queues import DEFAULT_QUEUE, QUEUE_RULE, is_queue_name
from shared.read.fleet import Fleet, read_fleet
from shared.read.hosts import is_host_name, list_hosts
from shared.read.queue_view import chosen, is_cursor, page
from shared.read.summary import busy
from shared.read.throughput import last_hour

# The columns of the counts table, in a job's usual path through them.
STATES = list(JobState)
# Queues the overview shows at most (docs/DASHBOARD.md): all of them while they fit; past
# that the queues live hosts serve, then the busiest, or a page of a search by name.
OVERVIEW_QUEUES = 25
# Queues the queues page shows at most, chosen as the overview chooses them.
QUEUES_PAGE = 50


def _overview_query() -> tuple[str | None, str | None]:
    """Return the name search and the page cursor the overview was asked for (None: none)."""
    search = request.args.get("q", "").strip() or None
    cursor = request.args.get("cursor") or None
    if search is not None and len(search) > SEARCH_MAX:
        raise UiError(400, f"a queue name search is at most {SEARCH_MAX} characters")
    if cursor is not None and not is_cursor(cursor):
        raise UiError(400, f"bad page cursor {cursor[:24]!r}: follow the page's own links")
    return search, cursor


def _served() -> Fleet:
    """Return the queues live hosts serve now (their WORKER_QUEUES: bounded by configuration),
    from the registry: two round trips, whatever the number of queues."""
    gw = gateway()
    return read_fleet(gw.redis, gw.keys)


def overview_context() -> dict[str, object]:
    """Return what the overview (and its live fragment) shows: a bounded set of queues read
    live, the totals of all (live while every queue is shown, else from the last sweep)."""
    gw = gateway()
    search, cursor = _overview_query()
    hosts = _served()

    def serving() -> list[str]:
        return sorted(hosts.types_by_queue)

    if search is None and cursor is None:
        view = chosen(gw.scripts, limit=OVERVIEW_QUEUES, first=serving)
    else:
        view = page(gw.scripts, limit=OVERVIEW_QUEUES, cursor=cursor, match=search)
    rows = sorted(view.shown.by_queue.items())
    if view.complete:
        # The chart: every queue while they fit (one round trip).
        charted = sorted(view.totals.by_queue if view.totals else view.shown.by_queue)
    else:
        # Else the queues live hosts serve: every completion and failure happens there (a
        # queue no host serves runs nothing). The busiest rows first.
        charted = serving()
        rows.sort(key=lambda item: -busy(item[1]))
    return {
        "view": view,
        "counts": view.totals,
        "rows": rows,
        "states": STATES,
        "workers": view.workers,
        "search": search,
        "live_query": {"q": search, "cursor": cursor},
        "chart": throughput_chart(last_hour(gw.scripts, charted[:OVERVIEW_QUEUES])),
        "served": hosts,
    }


@bp.route("/")
def overview_slash() -> BaseResponse:
    """Send /ui/ to the overview's one address, /ui."""
    return redirect(url_for("ui.overview"))


@bp.route("")
def overview() -> tuple[str, int]:
    """Show the totals, counts per state of a bounded set of queues, the last hour's chart."""
    return live_page("overview.html", "overview", "ui.overview_live", **overview_context())


@bp.route("/live/overview")
def overview_live() -> tuple[str, int]:
    """Return the overview's changing part alone, for live.js to swap in."""
    return render("_overview_live.html", "overview", **overview_context())


# What each live page refreshes on (live.js's data-live-on; absent: every event). The queues
# page: any job event (its counts) and a pause or resume. The workers page: a host joining,
# leaving, going quiet or resuming, and a claim or an end of a run (a process's current job).
# A gap (the stream was trimmed past the page) may hide any of these.
QUEUE_EVENTS = (
    "enqueued scheduled promoted claimed completed retrying dead recovered released replayed "
    "canceled purged held queue_paused queue_resumed gap"
)
WORKER_EVENTS = (
    "worker_joined worker_left worker_quiet worker_resumed "
    "claimed completed retrying dead recovered released gap"
)


def queues_context() -> dict[str, object]:
    """Return what the queues page (and its live fragment) shows: as the overview, every
    queue while they fit in a page, else the queues live hosts serve then the busiest, or a
    page of a search by name; each read live, with its limits (one round trip, two with any
    limited queue). The cost grows with the queues shown, not with those listed."""
    gw = gateway()
    search, cursor = _overview_query()
    hosts = _served()
    if search is None and cursor is None:
        view = chosen(gw.scripts, limit=QUEUES_PAGE, first=lambda: sorted(hosts.types_by_queue))
    else:
        view = page(gw.scripts, limit=QUEUES_PAGE, cursor=cursor, match=search)
    rows = sorted(view.shown.by_queue.items())
    if not view.complete:
        rows.sort(key=lambda item: -busy(item[1]))  # the busiest first (a stable sort)
    names = [name for name, _ in rows]
    limited = {s.queue: s for s in read_state(gw.scripts.redis, gw.scripts.keys, names)}
    return {
        "rows": rows,
        "states": STATES,
        "limits": limited,
        "deletable": {
            name
            for name in names
            if name != DEFAULT_QUEUE and name not in limited and _empty(view.shown.by_queue[name])
        },
        "view": view,
        "search": search,
        "live_query": {"q": search, "cursor": cursor},
        "served": hosts,
    }


def _empty(counts: QueueCounts) -> bool:
    """Tell whether a queue looks deletable from its counts: no unfinished or dead job, not
    paused (the delete checks again, in the step that deletes)."""
    finished = (JobState.COMPLETED, JobState.CANCELED)
    held = sum(n for state, n in counts.by_state.items() if state not in finished)
    return held == 0 and not counts.paused


@bp.route("/queues")
def queues() -> tuple[str, int]:
    """Show the queues (a bounded set of them): counts, paused or active, oldest pending,
    limits, pause and resume."""
    context = queues_context()
    return live_page("queues.html", "queues", "ui.queues_live", live_on=QUEUE_EVENTS, **context)


@bp.route("/live/queues")
def queues_live() -> tuple[str, int]:
    """Return the queues table alone, for live.js to swap in."""
    return render("_queues_live.html", "queues", **queues_context())


def _queue(name: str) -> str:
    if not is_queue_name(name):
        raise UiError(400, f"bad queue name {name[:64]!r}: a queue name {QUEUE_RULE}")
    return name


@bp.route("/queues/<name>/pause", methods=["POST"])
def pause_queue(name: str) -> BaseResponse:
    """Pause a queue (as POST /queues/<name>/pause does) and go back to the queues."""
    name = _queue(name)
    queue_actions.pause_queue(gateway(), name, by=asked_by())
    flash(f"Queue {name} paused: no worker claims from it until it is resumed.")
    return redirect(url_for("ui.queues"), code=303)


@bp.route("/queues/<name>/resume", methods=["POST"])
def resume_queue(name: str) -> BaseResponse:
    """Resume a paused queue and go back to the queues."""
    name = _queue(name)
    changed = queue_actions.resume_queue(gateway(), name, by=asked_by())
    flash(f"Queue {name} resumed." if changed else f"Queue {name} was not paused.")
    return redirect(url_for("ui.queues"), code=303)


@bp.route("/queues/<name>/delete", methods=["POST"])
def delete_queue(name: str) -> BaseResponse | tuple[str, int]:
    """Delete an empty queue (after a confirmation), as DELETE /queues/<name> does."""
    name = _queue(name)
    back = url_for("ui.queues")
    if not confirmed():
        message = (
            f"Delete queue {name}? Its completed and canceled jobs and its events go with it; "
            "an enqueue under this name later lists it again."
        )
        return confirm_page("Delete a queue", message, [], back)
    try:
        queue_actions.delete_queue(gateway(), name)
    except NotFound:
        raise UiError(404, "No such queue: it was deleted meanwhile, or never listed.") from None
    except QueueInUse as exc:
        flash(f"Queue {name} kept: {exc.kept.reason()}.")
    else:
        flash(f"Queue {name} deleted.")
    return redirect(back, code=303)


@bp.route("/workers")
def workers() -> tuple[str, int]:
    """Show every live workerd host, its processes and what they run."""
    gw = gateway()
    hosts = list_hosts(gw.redis, gw.keys)
    return live_page(
        "workers.html", "workers", "ui.workers_live", live_on=WORKER_EVENTS, hosts=hosts
    )


@bp.route("/live/workers")
def workers_live() -> tuple[str, int]:
    """Return the hosts and their processes alone, for live.js to swap in."""
    gw = gateway()
    return render("_workers_live.html", "workers", hosts=list_hosts(gw.redis, gw.keys))


def _ask_host(name: str, quiet: bool) -> BaseResponse:
    if not is_host_name(name):
        raise UiError(400, f"bad workerd host name {name[:64]!r}: expected <hostname>-<pid>")
    try:
        fleet.quiet_host(gateway(), name, quiet, by=asked_by())
    except NotFound:
        raise UiError(
            404, "That workerd host is not in the registry (it left or expired)."
        ) from None
    what = "finish its running jobs and claim nothing more" if quiet else "claim again"
    flash(f"Asked {name} to {what}; it applies this within a couple of seconds.")
    return redirect(url_for("ui.workers"), code=303)


@bp.route("/workers/<name>/quiet", methods=["POST"])
def quiet_host(name: str) -> BaseResponse:
    """Ask a host to claim nothing more (as POST /workers/<name>/quiet does)."""
    return _ask_host(name, True)


@bp.route("/workers/<name>/resume", methods=["POST"])
def resume_host(name: str) -> BaseResponse:
    """Ask a quiet host to claim again."""
    return _ask_host(name, False)
