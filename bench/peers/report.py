"""Turn bench.compare's results into figures: summary statistics, tables, the document.

Pure functions of the results dict (no I/O), so tests render them from a canned dict.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable
from typing import Any

# Columns of the results table, TaskForge first.
COLUMNS = (
    "taskforge",
    "huey",
    "dramatiq",
    "dramatiq-8",
    "celery",
    "celery-late",
    "rq-simple",
    "rq-fork",
)
# TaskForge's performance targets: (what, figure key, comparison, bound, unit).
TARGETS = (
    ("engine enqueue, one process", "tf.engine_enqueue", ">=", 3400, "jobs/s"),
    ("HTTP POST /enqueue", "tf.http_single", ">=", 2000, "req/s"),
    ("HTTP /enqueue/batch (1,000 a request)", "tf.http_batch_1000", ">=", 20000, "jobs/s"),
    ("drain, 1 worker", "tf.drain_1", ">=", 2000, "jobs/s"),
    ("drain, 2 workers", "tf.drain_2", ">=", 3000, "jobs/s"),
    ("drain, 4 workers", "tf.drain_4", ">=", 4000, "jobs/s"),
    ("enqueue→start p50, engine", "tf.latency_p50", "<=", 1.5, "ms"),
    ("enqueue→start p99, engine", "tf.latency_p99", "<=", 3, "ms"),
    ("enqueue→start p50, HTTP", "taskforge-http.latency_p50", "<=", 3, "ms"),
    ("enqueue→start p99, HTTP", "taskforge-http.latency_p99", "<=", 6, "ms"),
)
# What a peer configuration's lead is worth: its guarantee and concurrency, in a few words.
CAVEAT = {
    "huey": "no delivery guarantee",
    "dramatiq-8": "8 jobs at once per process",
    "celery": "at most once",
    "rq-simple": "at most once",
    "rq-fork": "at most once",
}
SPEC_TASK12 = {
    "concurrent_enqueue": ("Concurrent enqueue", 48, 472.6),
    "concurrent_priority_claims": ("Concurrent priority claims", 48, 745.3),
    "retry_then_dlq": ("Retry then DLQ", 16, 78.92),
    "scheduled_promotion": ("Scheduled promotion", 32, 575.7),
}
SPEC_SCALING = {"1": 167.8, "4": 506.7, "8": 647.5}


def stats(values: Iterable[float | None]) -> dict[str, float] | None:
    """Return median, min, max and count of the values that exist (None when none do)."""
    present = [float(v) for v in values if v is not None]
    if not present:
        return None
    return {
        "median": statistics.median(present),
        "min": min(present),
        "max": max(present),
        "n": len(present),
    }


def _get(data: Any, *path: str | int) -> Any:
    for key in path:
        if data is None:
            return None
        if isinstance(data, dict):
            data = data.get(key, data.get(str(key)))
        elif isinstance(data, list | tuple) and isinstance(key, int) and key < len(data):
            data = data[key]
        else:
            return None
    return data


def summarize(results: dict) -> dict[str, dict[str, dict[str, float] | None]]:
    """Return {column: {figure: stats}}; TaskForge's own benchmarks are under "tf"."""
    summary: dict[str, dict[str, dict[str, float] | None]] = {}
    workers = [str(w) for w in results.get("settings", {}).get("workers", [1, 2, 4])]
    for key, reps in results.get("runs", {}).items():
        figures: dict[str, dict[str, float] | None] = {}

        def over(*path: str | int, reps: list = reps) -> dict[str, float] | None:
            return stats(_get(rep, *path) for rep in reps)

        for w in workers:
            figures[f"drain_{w}"] = over("drain", w, "jobs_per_s")
            for name in (
                "round_trips_per_job",
                "commands_per_job",
                "redis_cpu_us_per_job",
                "enqueue_redis_cpu_us_per_job",
                "pss_mb",
                "processes_cpu_us_per_job",
                "steady_redis_cpu_us_per_job",
            ):
                figures[f"{name}_{w}"] = over("drain", w, name)
        for p in ("p50", "p95", "p99", "max"):
            figures[f"latency_{p}"] = over("latency", f"{p}_ms")
        figures["latency_redis_cpu_us_per_job"] = over("latency", "redis_cpu_us_per_job")
        for mode in ("single", "bulk"):
            figures[f"enqueue_{mode}"] = over("enqueue", mode, "jobs_per_s")
        summary[key] = figures

    own = results.get("taskforge_own") or []
    if own:

        def tf(*path: str | int) -> dict[str, float] | None:
            return stats(_get(rep, *path) for rep in own)

        summary["tf"] = {
            "engine_enqueue": tf("engine", "results", "1", "enqueue_per_s"),
            "engine_enqueue_2": tf("engine", "results", "2", "enqueue_per_s"),
            "engine_claim_complete": tf("engine", "results", "1", "claim_complete_per_s"),
            "engine_fused": tf("engine", "results", "1", "fused_per_s"),
            "http_single": tf("gateway", "single", 0),
            "http_single_cpu_us": tf("gateway", "single", 1),
            "http_batch_100": tf("gateway", "batch 100", 0),
            "http_batch_1000": tf("gateway", "batch 1000", 0),
            "latency_p50": tf("workers", "start_latency_ms", "p50"),
            "latency_p99": tf("workers", "start_latency_ms", "p99"),
            "promotion_lateness_p99": tf("workers", "promotion_lateness_ms", "p99"),
            **{f"drain_{w}": tf("workers", "drain_jobs_per_s", w) for w in ("1", "2", "4", "8")},
        }
    return summary


def figure(summary: dict, ref: str) -> dict[str, float] | None:
    """Return the stats named "column.figure"."""
    column, _, name = ref.partition(".")
    return summary.get(column, {}).get(name)


def fmt(value: float | None, unit: str = "") -> str:
    """Format one number for a table: thousands separated, decimals only when small."""
    if value is None:
        return "—"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    else:
        text = f"{value:.2f}"
    return text + unit


def cell(s: dict[str, float] | None, ranged: bool = True) -> str:
    """Format stats as "median (min–max)", or "—"."""
    if not s:
        return "—"
    if not ranged or s["n"] < 2 or fmt(s["min"]) == fmt(s["max"]):
        return fmt(s["median"])
    return f"{fmt(s['median'])} ({fmt(s['min'])}–{fmt(s['max'])})"


def _labels(results: dict) -> dict[str, str]:
    return {key: c["label"] for key, c in results.get("configs", {}).items()}


def _columns(results: dict) -> list[str]:
    present = set(results.get("runs", {}))
    return [c for c in COLUMNS if c in present]


def _system_of(results: dict, key: str) -> str:
    return results.get("configs", {}).get(key, {}).get("system", key)


def _enqueue(results: dict, summary: dict, key: str, mode: str) -> dict[str, float] | None:
    """A configuration's enqueue figure: enqueue is per library, so share the system's."""
    own = figure(summary, f"{key}.enqueue_{mode}")
    if own:
        return own
    system = _system_of(results, key)
    for other in summary:
        if other != key and _system_of(results, other) == system:
            found = figure(summary, f"{other}.enqueue_{mode}")
            if found:
                return found
    return None


# One row of the results table: (label, higher_is_better, value(column) -> stats)
Row = tuple[str, bool | None, Callable[[str], dict[str, float] | None]]


def rows(results: dict) -> list[Row]:
    """The results table's rows, as functions of a column key."""
    s = results.get("summary") or summarize(results)
    w1 = str(results.get("settings", {}).get("workers", [1])[0])

    def same_method(name: str) -> Callable[[str], Any]:
        """Every system's figure `name` by the harness's method, TaskForge's too."""
        return lambda key: figure(s, f"{key}.{name}")

    out: list[Row] = [
        (
            "enqueue, single call, 1 producer (jobs/s)",
            True,
            lambda k: (
                figure(s, "tf.engine_enqueue")
                if k == "taskforge"
                else _enqueue(results, s, k, "single")
            ),
        ),
        (
            "enqueue, bulk API, 1 producer (jobs/s)",
            True,
            lambda k: _enqueue(results, s, k, "bulk"),
        ),
        (
            "enqueue, HTTP `POST /enqueue`, 16 clients (req/s)",
            None,
            lambda k: figure(s, "tf.http_single") if k == "taskforge" else None,
        ),
        (
            "enqueue, HTTP `/enqueue/batch` ×1,000, 4 clients (jobs/s)",
            None,
            lambda k: figure(s, "tf.http_batch_1000") if k == "taskforge" else None,
        ),
    ]
    for w in results.get("settings", {}).get("workers", [1, 2, 4]):
        out.append(
            (
                f"drain, {w} worker{'s' if w > 1 else ''} (jobs/s)",
                True,
                # bench.workers measures TaskForge's drain otherwise (as Redis recorded it):
                # that figure is for its targets, not for a race.
                same_method(f"drain_{w}"),
            )
        )
    out += [
        ("enqueue→start p50 (ms)", False, same_method("latency_p50")),
        ("enqueue→start p95 (ms)", False, same_method("latency_p95")),
        ("enqueue→start p99 (ms)", False, same_method("latency_p99")),
        (
            "enqueue→start p50 / p99 via HTTP (ms)",
            None,
            lambda k: None,
        ),
        (
            f"Redis round trips per job (drain, {w1} worker)",
            False,
            same_method(f"round_trips_per_job_{w1}"),
        ),
        (
            f"Redis commands per job (drain, {w1} worker)",
            False,
            same_method(f"commands_per_job_{w1}"),
        ),
        (
            f"Redis CPU µs per job (drain, {w1} worker)",
            False,
            same_method(f"redis_cpu_us_per_job_{w1}"),
        ),
    ]
    return out


def results_table(results: dict) -> str:
    """The side-by-side table: medians with (min–max) over the repetitions."""
    s = results.get("summary") or summarize(results)
    labels = _labels(results)
    columns = _columns(results)
    head = "| workload | " + " | ".join(labels.get(c, c) for c in columns) + " |"
    lines = [head, "|---" * (len(columns) + 1) + "|"]
    done: set[str] = set()
    for label, _, value in rows(results):
        if label.startswith("enqueue→start p50 / p99 via HTTP"):
            p50 = figure(s, "taskforge-http.latency_p50")
            p99 = figure(s, "taskforge-http.latency_p99")
            cells = [
                f"{cell(p50)} / {cell(p99)}" if c == "taskforge" and p50 else "—" for c in columns
            ]
        else:
            cells = [cell(value(c)) for c in columns]
        if label.startswith("drain,") and "drain" not in done:
            done.add("drain")
            jobs = [f"{results['configs'].get(c, {}).get('drain_jobs', 0):,}" for c in columns]
            lines.append("| drain: jobs per run | " + " | ".join(jobs) + " |")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def target_status(results: dict) -> list[dict[str, Any]]:
    """Each performance target with the measured median and whether it was met."""
    s = results.get("summary") or summarize(results)
    out = []
    for what, ref, op, bound, unit in TARGETS:
        got = figure(s, ref)
        value = got["median"] if got else None
        met = None if value is None else (value >= bound if op == ">=" else value <= bound)
        out.append(
            {
                "target": what,
                "bound": f"{op.replace('>=', '≥').replace('<=', '≤')} {fmt(bound)} {unit}",
                "value": value,
                "unit": unit,
                "met": met,
                "range": got,
            }
        )
    return out


def targets_markdown(results: dict) -> str:
    """The plain met / missed list."""
    lines = []
    for t in target_status(results):
        verdict = {True: "**met**", False: "**missed**", None: "not measured"}[t["met"]]
        rng = t["range"]
        span = f" (range {fmt(rng['min'])}–{fmt(rng['max'])})" if rng and rng["n"] > 1 else ""
        lines.append(
            f"- {t['target']} {t['bound']}: {verdict} — {fmt(t['value'])} {t['unit']}{span}"
        )
    return "\n".join(lines)


def not_leading(results: dict) -> list[str]:
    """Rows where some peer configuration's median beats TaskForge's."""
    labels = _labels(results)
    out = []
    for label, higher, value in rows(results):
        if higher is None:
            continue
        ours = value("taskforge")
        if not ours:
            continue
        better = []
        for key in _columns(results):
            if key == "taskforge":
                continue
            theirs = value(key)
            if not theirs:
                continue
            if (
                (theirs["median"] > ours["median"])
                if higher
                else (theirs["median"] < ours["median"])
            ):
                tag = f" ({CAVEAT[key]})" if key in CAVEAT else ""
                better.append(f"{labels.get(key, key)} {fmt(theirs['median'])}{tag}")
        if better:
            out.append(
                f"{label}: TaskForge {fmt(ours['median'])}; ahead of it: {', '.join(better)}"
            )
    return out


def task12_table(results: dict) -> str:
    """The Go original's "Task 12" benchmark table beside TaskForge's figures at its size and 10,000."""
    data = (results.get("task12") or {}).get("results")
    s = results.get("summary") or summarize(results)
    if not data:
        return "_Task 12 not measured in this run._"
    lines = [
        "| workload | batch | Go original (Task 12) jobs/s | TaskForge jobs/s | TaskForge ns per job |",
        "|---|---|---|---|---|",
    ]
    for name, (label, spec_n, spec_rate) in SPEC_TASK12.items():
        for size, fig in sorted(data.get(name, {}).items(), key=lambda kv: int(kv[0])):
            variants = fig.items() if "promotion" in fig else [("", fig)]
            for variant, f in variants:
                suffix = f" ({variant.replace('_', ' ')})" if variant else ""
                spec = fmt(spec_rate) if int(size) == spec_n else "—"
                lines.append(
                    f"| {label}{suffix} | {int(size):,} | {spec} | {fmt(f['jobs_per_s'])} | {f['ns_per_job']:,.0f} |"
                )
    lines += [
        "",
        "| worker scaling (workerd, 10,000 no-op jobs) | Go original (48 jobs) jobs/s | TaskForge jobs/s |",
        "|---|---|---|",
    ]
    for w, spec in SPEC_SCALING.items():
        lines.append(
            f"| {w} worker{'s' if w != '1' else ''} | {fmt(spec)} | {cell(figure(s, f'tf.drain_{w}'))} |"
        )
    return "\n".join(lines)


def taskforge_table(results: dict) -> str:
    """Every figure of TaskForge's own benchmarks (bench.engine, bench.gateway, bench.workers)."""
    s = results.get("summary") or summarize(results)
    tf = s.get("tf") or {}
    if not tf:
        return "_TaskForge's own benchmarks were not run._"
    rows_ = (
        ("bench.engine: enqueue, 1 / 2 processes (jobs/s)", ("engine_enqueue", "engine_enqueue_2")),
        (
            "bench.engine: claim + complete as two calls, 1 process (jobs/s)",
            ("engine_claim_complete",),
        ),
        (
            "bench.engine: complete-and-claim-next in one call, 1 process (jobs/s)",
            ("engine_fused",),
        ),
        ("bench.gateway: `POST /enqueue`, 16 clients (req/s)", ("http_single",)),
        ("bench.gateway: gunicorn workers' CPU per request (µs)", ("http_single_cpu_us",)),
        (
            "bench.gateway: `/enqueue/batch`, 100 / 1,000 jobs a request, 4 clients (jobs/s)",
            ("http_batch_100", "http_batch_1000"),
        ),
        (
            "bench.workers: drain, 1 / 2 / 4 / 8 workers (jobs/s)",
            ("drain_1", "drain_2", "drain_4", "drain_8"),
        ),
        (
            "bench.workers: enqueue→start p50 / p99, 2 idle workers (ms)",
            ("latency_p50", "latency_p99"),
        ),
        (
            "bench.workers: 1,000 jobs due at once, promotion lateness p99 (ms)",
            ("promotion_lateness_p99",),
        ),
    )
    lines = ["| figure | median (min–max) |", "|---|---|"]
    for label, names in rows_:
        lines.append(f"| {label} | {' / '.join(cell(tf.get(n)) for n in names)} |")
    return "\n".join(lines)


def latency_table(results: dict) -> str:
    """enqueue→start latency of every configuration by the shared method, with ranges."""
    s = results.get("summary") or summarize(results)
    labels = _labels(results)
    lines = ["| configuration | p50 ms | p95 ms | p99 ms | max ms |", "|---|---|---|---|---|"]
    for key in results.get("runs", {}):
        f = s.get(key, {})
        lines.append(
            f"| {labels.get(key, key)} | {cell(f.get('latency_p50'))} | {cell(f.get('latency_p95'))} | "
            f"{cell(f.get('latency_p99'))} | {cell(f.get('latency_max'))} |"
        )
    return "\n".join(lines)


def cost_table(results: dict) -> str:
    """Redis round trips, commands and CPU per job at every worker count, plus drain rate."""
    s = results.get("summary") or summarize(results)
    labels = _labels(results)
    workers = results.get("settings", {}).get("workers", [1, 2, 4])
    lines = [
        "| configuration | workers | drain jobs/s (this method) | round trips/job | commands/job | Redis CPU µs/job |",
        "|---|---|---|---|---|---|",
    ]
    for key in results.get("runs", {}):
        f = s.get(key, {})
        for w in workers:
            if not f.get(f"drain_{w}"):
                continue
            lines.append(
                f"| {labels.get(key, key)} | {w} | {cell(f.get(f'drain_{w}'))} | "
                f"{cell(f.get(f'round_trips_per_job_{w}'))} | {cell(f.get(f'commands_per_job_{w}'))} | "
                f"{cell(f.get(f'redis_cpu_us_per_job_{w}'))} |"
            )
    return "\n".join(lines)


def per_k_tables(results: dict) -> str:
    """One table per worker count: jobs/s, Redis CPU per job, PSS and start latency."""
    s = results.get("summary") or summarize(results)
    labels = _labels(results)
    configs = results.get("configs", {})
    st = results.get("settings", {})
    io_wait = st.get("io_wait_ms") or 0
    body = f"I/O body: one Redis round trip + {fmt(io_wait)} ms wait" if io_wait else "no-op body"
    out = []
    for w in st.get("workers", [1, 2, 4]):
        lines = [
            f"k = {w} worker process(es), {body}; p50 = enqueue→start with "
            f"{st.get('latency_workers', 2)} idle workers",
            "",
            "| configuration | concurrency | jobs/s | Redis CPU µs/job (run) | "
            "Redis CPU µs/job (enqueue) | CPU µs/job, steady: processes / Redis | "
            "enqueue path | PSS MB (peak) | p50 ms |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for key in results.get("runs", {}):
            f = s.get(key, {})
            if not f.get(f"drain_{w}"):
                continue
            c = configs.get(key, {})
            lines.append(
                f"| {labels.get(key, key)} | {c.get('concurrency', {}).get(str(w), '?')} | "
                f"{cell(f.get(f'drain_{w}'))} | {cell(f.get(f'redis_cpu_us_per_job_{w}'))} | "
                f"{cell(f.get(f'enqueue_redis_cpu_us_per_job_{w}'))} | "
                f"{cell(f.get(f'processes_cpu_us_per_job_{w}'))} / "
                f"{cell(f.get(f'steady_redis_cpu_us_per_job_{w}'))} | "
                f"{c.get('enqueue_path', '?')} | {cell(f.get(f'pss_mb_{w}'))} | "
                f"{cell(f.get('latency_p50'))} |"
            )
        out.append("\n".join(lines))
    out.append(latency_cost_table(results))
    return "\n\n".join(out)


def latency_cost_table(results: dict) -> str:
    """The start-latency runs by enqueue path, with Redis CPU per job for enqueue and run
    together (the only TaskForge figure whose jobs go through the gateway)."""
    s = results.get("summary") or summarize(results)
    labels = _labels(results)
    interval = results.get("settings", {}).get("latency_interval_ms", 10)
    lines = [
        f"enqueue→start, idle workers, jobs {fmt(interval)} ms apart; Redis CPU covers enqueue "
        "and run (idle polling included)",
        "",
        "| configuration | workers | enqueue path | p50 ms | p99 ms | Redis CPU µs/job |",
        "|---|---|---|---|---|---|",
    ]
    for key, reps in results.get("runs", {}).items():
        f = s.get(key, {})
        if not f.get("latency_p50"):
            continue
        first = _get(reps, 0, "latency") or {}
        lines.append(
            f"| {labels.get(key, key)} | {first.get('workers', '?')} | "
            f"{first.get('enqueue_path', '?')} | {cell(f.get('latency_p50'))} | "
            f"{cell(f.get('latency_p99'))} | {cell(f.get('latency_redis_cpu_us_per_job'))} |"
        )
    return "\n".join(lines)


def config_table(results: dict) -> str:
    """Every configuration: its settings, delivery guarantee and versions."""
    versions = results.get("versions", {})
    lines = ["| configuration | settings | delivery guarantee | version |", "|---|---|---|---|"]
    for c in results.get("configs", {}).values():
        system = c["system"]
        v = versions.get(system, {})
        version = (
            f"commit {results.get('meta', {}).get('commit', '?')[:10]}, redis-py {v.get('redis', '?')}"
            if system == "taskforge"
            else f"{system} {v.get(system, '?')}, redis-py {v.get('redis', '?')}, hiredis {v.get('hiredis', '?')}"
        )
        jobs = c.get("drain_jobs")
        note = (
            f"; drains {jobs:,} jobs"
            if jobs and jobs != results.get("settings", {}).get("jobs")
            else ""
        )
        lines.append(f"| {c['label']} | {c['config']}{note} | {c['guarantee']} | {version} |")
    return "\n".join(lines)


def machine_lines(results: dict) -> str:
    m = results.get("meta", {})
    changed = m.get("dirty") or []
    if m.get("frozen_export"):
        changed = []
    dirty = (
        f" plus uncommitted changes to {', '.join(f'`{f}`' for f in changed)} (others' work in "
        "progress in the shared work tree)"
        if changed
        else ""
    )
    return "\n".join(
        [
            f"- Commit `{m.get('commit', '?')}`{dirty}"
            + (" (run from a clean `git archive` export of it)" if m.get("frozen_export") else "")
            + f", measured {m.get('date', '?')}, "
            f"run time {m.get('minutes', '?')} minutes",
            f"- CPU: {m.get('cpu_model', '?')}, {m.get('cpus', '?')} cores; "
            f"{m.get('memory_gib', '?')} GiB memory; Linux {m.get('kernel', '?')}",
            f"- {m.get('redis_server', '?')} ({m.get('redis_binary', '?')}), one private "
            "server per configuration, no persistence; Python "
            f"{m.get('python', '?')}",
            f"- Load average (1 min) at start {m.get('load_average_start', 0):.1f}, at end "
            f"{m.get('load_average_end', 0):.1f}: other engineers' test runs share these 2 cores",
        ]
    )


def notes_section(results: dict) -> str:
    """Notes recorded beside the run (side checks), as a section; empty when there are none."""
    notes = results.get("notes") or []
    if not notes:
        return ""
    return "## Notes\n\n" + "\n".join(f"- {note}" for note in notes) + "\n\n"


def document(results: dict, chart_name: str = "benchmarks.png") -> str:
    """bench/BENCHMARKS.md."""
    st = results.get("settings", {})
    m = results.get("meta", {})
    jobs = st.get("jobs", 10_000)
    lagging = not_leading(results)
    lag_text = (
        "\n".join(f"- {line}" for line in lagging) or "- None: TaskForge leads every compared row."
    )
    smaller = [
        f"{c['label']} {c['drain_jobs']:,}"
        for c in results.get("configs", {}).values()
        if c.get("drain_jobs") and c["drain_jobs"] < jobs
    ]
    smaller_text = (
        "The slowest configurations drain fewer jobs per run ("
        + ", ".join(smaller)
        + f"), not {jobs:,}: at their rates, {jobs:,}-job drains at 1, 2 and 4 workers, three "
        "times, would take the run to about 40 minutes instead of its 25-minute budget. The "
        "rate runs from the first job's start to the last job's end, so it does not depend on "
        "the queue's length; `--full-size` drains the full number everywhere."
        if smaller
        else f"Every configuration drained {jobs:,} jobs per run."
    )
    pins = results.get("pins", {})
    pin_text = "; ".join(f"{system}: `{' '.join(p)}`" for system, p in pins.items())
    return f"""# Benchmarks: TaskForge beside RQ, Celery, Dramatiq and Huey

One command measured every system below on the same machine, in the same run, each against
its own private `redis-server`, with no-op jobs, tracing off and every system at log level
INFO (TaskForge's production default; the peers' default or `-l INFO`). Figures are medians
of {st.get("repeat", 3)} repetition(s) with the (min–max) range; repetitions were interleaved
(every configuration once, then again) so a busy moment hits every system alike.

```sh
{m.get("command", ".venv/bin/python -m bench.compare")}
```

It builds the peers' virtualenvs itself (`var/bench-venvs/<peer>`, pinned in
`bench/peers/venvs.py`: {pin_text}), writes `bench/results/compare.json` (every figure and
setting), this file and `bench/{chart_name}`. `--quick` is a small smoke run; `--only huey
taskforge` selects systems.

## Machine

{machine_lines(results)}

**These figures are noisy.** The machine has two cores and other engineers ran test suites
on it during the run; the ranges show how much. A figure whose range is wide was disturbed.
Every system here ran under the same disturbance, in interleaved repetitions, so the
side-by-side comparison holds better than any one figure.

## Configurations

Every configuration runs one job at a time per worker process unless it says otherwise.

{config_table(results)}

## Results

{jobs:,} jobs per enqueue and drain run unless the configuration table says otherwise;
enqueue→start latency with 2 idle worker processes, {st.get("latency_jobs", 300)} jobs 10 ms apart.

{results_table(results)}

![Throughput and latency, TaskForge and the peers](./{chart_name})

TaskForge's column comes from its own benchmarks (`bench.engine`: engine enqueue;
`bench.gateway`: HTTP, {st.get("http_seconds", 5):g} s per figure with 16 keep-alive clients for single
requests and 4 for batches), except the drain, enqueue→start and Redis rows, which come
from the peers' method, so that every system's drain and latency are measured alike
(`bench.workers`' own drain and latency are in TaskForge's own figures and its targets). "Redis commands per job" counts the commands run inside Lua
scripts: TaskForge's run inside about one script call per job (see round trips), so that row
and Redis CPU measure the work Redis does for a job, not network traffic.

### TaskForge's performance targets

{targets_markdown(results)}

### Where TaskForge does not lead

{lag_text}

### TaskForge's own benchmarks, every figure

{taskforge_table(results)}

### enqueue→start latency, every configuration by the same method

{latency_table(results)}

### Redis cost per job and drain rate by the peers' method (TaskForge included)

{cost_table(results)}

### Per worker count: rate, Redis CPU, memory (PSS) and start latency

{per_k_tables(results)}

## What one job costs: Redis commands, CPU and memory

The hot path's Redis commands per call, Redis CPU and instructions per job before and after
the hot-path work, bytes of Redis per job and a 10-minute soak are in
[PER_JOB_COST.md](PER_JOB_COST.md) (written by hand; `bench.compare` rewrites this file).

## The Go original's Task 12 table, for TaskForge

The Go original measured 48 jobs; TaskForge's engine (4 concurrent processes for the
concurrent rows, one process otherwise) at its batch size and at {jobs:,} jobs. The
retry-then-DLQ row skips the configured backoff wait (it promotes with a clock an hour
ahead), so it measures the engine's work: three executions, two retries and the DLQ.

{task12_table(results)}

{notes_section(results)}## Method

- **enqueue**: one producer process; the library's normal call in a loop (RQ
  `Queue.enqueue`, Celery `task.delay`, Dramatiq `actor.send`, Huey calling the task,
  TaskForge `Scripts.enqueue` — the engine call the gateway makes). Bulk: RQ
  `Queue.enqueue_many` with `Queue.prepare_data` (1,000 a call, one pipeline),
  TaskForge `Scripts.enqueue_many` (1,000 a call, one MULTI/EXEC); Celery
  `group(...).apply_async()` and Dramatiq `group(...).run()` are what those libraries offer,
  but they publish message by message (no bulk round trip); Huey has no bulk API.
- **drain**: the queue is pre-filled with N jobs, then N worker processes start. Every
  task body (the same in every system: `bench/peers/stamp.py`) appends one line with its
  start and end time to a per-process file — no Redis round trip, so measuring adds nothing
  to the Redis figures. Rate = N / (last job's end − first job's start): first job start to
  last job finish, worker start-up excluded. The record count must be exactly N. The results
  table's drain rows are every system's by this method; TaskForge's targets and its own
  figures use `bench.workers`, which measures first start to last finish as Redis recorded
  them (`started_at`, `finished_at`).
- **enqueue→start latency**: 2 idle worker processes, warmed up; the producer sends
  jobs 10 ms apart, each carrying `time.time()` at sending; latency = the task's
  `time.time()` at its start minus that. Nearest-rank percentiles.
- **Redis cost**: `INFO` before the workers start and as soon as the last job's record
  appears. Round trips/job ≈ Δ`total_reads_processed` / N (requests Redis read from clients:
  a pipeline or a script call is one); commands/job = Δ(sum of `INFO commandstats` calls) / N,
  which counts commands run inside Lua scripts and MULTI/EXEC too; Redis CPU µs/job =
  Δ(`used_cpu_sys` + `used_cpu_user`) / N. The window includes the workers' start-up and
  idle polling, amortised over N jobs. Per-command counts are in `compare.json`.
- **Steady CPU** (the per-k tables' "steady" column): from a tenth of a drain's jobs done to
  the last, start-up left out: the system's processes' user + system CPU (every process of
  its tree, /proc/<pid>/stat, reaped children included) and Redis's, each ÷ the jobs run in
  that window. Two figures of one cost: together they are a job's CPU on this machine.
- **Delivery guarantees** are stated per configuration above; a faster figure from a
  configuration that can lose a job (Huey, Celery's default early ack, RQ) is not
  like-for-like with TaskForge's at-least-once.

## Caveats

- {smaller_text}
- RQ's default worker forks a work horse for every job. With jobs 10 ms apart (100 a second)
  its two workers cannot keep up, so its latency row measures a growing queue, not an idle
  worker's start-up.
- Dramatiq with 8 threads runs up to 8 jobs at once per process: it is the configuration
  Dramatiq recommends, not a one-job-at-a-time one. Dramatiq's Redis consumer polls: finding
  its queue empty, it sleeps 5 ms doubling (with jitter) up to `dramatiq_worker_timeout`
  (1,000 ms by default) before it fetches again (`dramatiq/brokers/redis.py`,
  `compute_backoff`), which is what its p95 and p99 show.
- The HTTP rows are TaskForge-only: the peers have no HTTP front end.
- The enqueue figure of a peer is shared by its configurations (the producer is the same).
"""
