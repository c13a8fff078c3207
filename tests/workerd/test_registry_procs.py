"""The registry record's ``procs``: written from the slots (workerd/duties/fleet_heartbeat.py), read
back by shared/read/hosts.py for GET /workers, and what a malformed record gives."""

from __future__ import annotations

import json

from shared.read.hosts import WorkerProcess, parse_processes
from workerd.duties.fleet_heartbeat import processes_json
from workerd.slots import SlotState, SlotTable

JOB = "0b8a4c4e-9d6f-4a57-9d0e-3c1f1d2b7a10"


def test_a_slot_records_the_type_and_queue_of_the_job_it_runs() -> None:
    slot = SlotTable(1).slot(0)
    slot.start_job(JOB, 7, 30.0, "critical", "x" * 128)  # the longest type a job can have

    state = slot.read()

    assert state is not None
    assert (state.job_id, state.queue, state.job_type) == (JOB, "critical", "x" * 128)
    slot.beat()
    idle = slot.read()
    assert idle is not None and (idle.job_id, idle.queue, idle.job_type) == (None, "", "")


def test_procs_turn_monotonic_slot_times_into_epoch_ms_and_round_trip() -> None:
    wall, mono = 1_767_225_600.0, 500.0  # the host's clocks when the heartbeat is written
    busy = SlotState(499.5, JOB, 3, 490.0, 30.0, queue="critical", job_type="pdf")
    idle = SlotState(heartbeat=499.0, job_id=None, token=0, job_started=0.0, job_timeout=0.0)

    raw = processes_json([(101, busy), (102, idle), (103, None)], wall, mono)

    assert json.loads(raw) == [
        {
            "pid": 101,
            "job_id": JOB,
            "type": "pdf",
            "queue": "critical",
            "busy_since_ms": 1_767_225_590_000,
            "beat_ms": 1_767_225_599_500,
        },
        {
            "pid": 102,
            "job_id": None,
            "type": None,
            "queue": None,
            "busy_since_ms": None,
            "beat_ms": 1_767_225_599_000,
        },
    ]  # 103 was mid-write: left out until the next heartbeat
    assert parse_processes(raw.encode()) == [
        WorkerProcess(101, JOB, "pdf", "critical", 1_767_225_590_000, 1_767_225_599_500),
        WorkerProcess(102, None, None, None, None, 1_767_225_599_000),
    ]


def test_a_record_without_procs_or_with_a_broken_one_lists_no_process() -> None:
    assert parse_processes(None) == []
    assert parse_processes(b"not json") == []
    assert parse_processes(b'{"pid": 1}') == []
    broken = b'[{"pid": "1"}, 5, {"pid": 2, "job_id": 3, "beat_ms": "x"}]'
    assert parse_processes(broken) == [WorkerProcess(2, None, None, None, None, None)]
