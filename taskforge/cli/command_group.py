"""The ``taskforge`` command group: global options, the shared client, exit codes, errors.

Every command is built on ``taskforge.Client`` alone. ``run`` turns whatever goes wrong into
one line on stderr (``taskforge: error: ...``) and a documented exit status, never a traceback.
"""

from __future__ import annotations

import enum
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import click

from taskforge.cli.render import pretty
from taskforge.client import Client
from taskforge.errors import ApiError, TaskForgeError, Unauthorized, Unavailable
from taskforge.transport import DEFAULT_URL

PROG = "taskforge"


class Exit(enum.IntEnum):
    """The exit statuses (``taskforge --help`` and docs/CLI.md list them)."""

    OK = 0
    API_ERROR = 1  # the gateway refused: bad input, not found, conflict (4xx), or a 5xx
    USAGE = 2  # a bad command line or local input (click's own code for usage errors)
    UNAVAILABLE = 3  # the gateway could not be reached, or answered 503, on every try
    UNAUTHORIZED = 4  # no token, or the wrong one
    DEAD = 5  # wait: the job died
    CANCELED = 6  # wait: the job was canceled
    WAIT_TIMEOUT = 7  # wait: the job was still unfinished when the wait ended
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as shells report it)


EPILOG = """\b
Exit status:
  0  ok
  1  the gateway refused the request (bad input, not found, conflict)
  2  usage error (bad option, bad JSON payload, missing payload file)
  3  gateway unavailable or unreachable (after the retries)
  4  unauthorized (set --token or TASKFORGE_API_TOKEN)
  5  wait: the job is dead
  6  wait: the job was canceled
  7  wait: the job was still unfinished when the wait timed out
  130  interrupted (Ctrl-C); stats --watch, whose way out it is, exits 0

\b
Completion (bash; zsh and fish alike):
  eval "$(_TASKFORGE_COMPLETE=bash_source taskforge)"
"""


@dataclass
class Session:
    """What the global options chose; builds the client on first use (not for --help)."""

    url: str
    token: str | None
    as_json: bool
    timeout: float
    retries: int
    _client: Client | None = field(default=None, repr=False)

    @property
    def client(self) -> Client:
        """Return the one client every command of this run shares."""
        if self._client is None:
            self._client = Client(
                self.url, self.token or "", timeout=self.timeout, retries=self.retries
            )
        return self._client

    def close(self) -> None:
        """Close the client's connections, if one was made."""
        if self._client is not None:
            self._client.close()


pass_session = click.make_pass_decorator(Session)


@click.group(epilog=EPILOG, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--url",
    envvar="TASKFORGE_URL",
    default=DEFAULT_URL,
    show_default=True,
    help="The gateway's base URL [env: TASKFORGE_URL].",
)
@click.option(
    "--token",
    envvar="TASKFORGE_API_TOKEN",
    default=None,
    help="The API token, when the gateway requires one [env: TASKFORGE_API_TOKEN].",
)
@click.option("--json", "as_json", is_flag=True, help="Print the server's JSON, for scripts.")
@click.option(
    "--request-timeout",
    "timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds each try of a request may take (to connect, then to answer); "
    "not a job's --timeout nor wait's.",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=4,
    show_default=True,
    help="How many times a failed request is tried again, when a repeat is safe.",
)
@click.version_option(package_name="taskforge", prog_name=PROG)
@click.pass_context
def cli(
    ctx: click.Context, url: str, token: str | None, as_json: bool, timeout: float, retries: int
) -> None:
    """Enqueue TaskForge jobs and look after them through the gateway's HTTP API."""
    session = Session(url, token, as_json, timeout, retries)
    ctx.obj = session
    ctx.call_on_close(session.close)


def _as_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """Turn --json on for this run when a command is given it (the group has run by then)."""
    if value:
        ctx.find_object(Session).as_json = True  # type: ignore[union-attr]


def json_everywhere(group: click.Group) -> None:
    """Give every command under `group` its own --json, so it may follow the command too
    (``taskforge jobs ls --state dead --json``), as users of other CLIs expect."""
    for command in group.commands.values():
        if isinstance(command, click.Group):
            json_everywhere(command)
        elif not any(param.name == "json_output" for param in command.params):
            command.params.append(
                click.Option(
                    ["--json", "json_output"],
                    is_flag=True,
                    expose_value=False,
                    callback=_as_json,
                    help="Print the server's JSON, for scripts.",
                )
            )


def output(session: Session, doc: Any, human: str) -> None:
    """Print the server's JSON with --json, else the human text."""
    click.echo(pretty(doc) if session.as_json else human)


def run(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return its exit status after reporting any error in one line."""
    try:
        status = cli.main(args=argv, prog_name=PROG, standalone_mode=False)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        return fail(exc.format_message() + hint, Exit.USAGE)
    except click.ClickException as exc:
        return fail(exc.format_message(), exc.exit_code)
    except click.Abort:
        return fail("interrupted", Exit.INTERRUPTED)
    except Unauthorized as exc:
        return fail(f"{exc.message} (HTTP 401; set --token or TASKFORGE_API_TOKEN)", exc_code(exc))
    except ApiError as exc:
        status = f"HTTP {exc.status}"
        return fail(
            exc.message if status in exc.message else f"{exc.message} ({status})", exc_code(exc)
        )
    except TaskForgeError as exc:
        return fail(str(exc), exc_code(exc))
    except (ValueError, TypeError) as exc:
        # The client's own argument checks (a bad URL, at and delay together, ...).
        return fail(str(exc), Exit.USAGE)
    except BrokenPipeError:
        # `taskforge jobs ls ... | head`: the reader left; nothing to report.
        sys.stderr.close()
        return Exit.OK
    except OSError as exc:
        return fail(f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc), 1)
    return status if isinstance(status, int) else Exit.OK


def exc_code(exc: TaskForgeError) -> int:
    """Return the exit status for a client error."""
    if isinstance(exc, Unauthorized):
        return Exit.UNAUTHORIZED
    if isinstance(exc, Unavailable):
        return Exit.UNAVAILABLE
    return Exit.API_ERROR


def fail(message: str, status: int) -> int:
    """Report one error line on stderr; return the exit status."""
    # Click spreads some messages over lines ("Choose from:" and a list): one line, always.
    line = " ".join(part.strip() for part in message.splitlines() if part.strip())
    click.echo(f"{PROG}: error: {line or 'unknown error'}", err=True)
    return int(status)
