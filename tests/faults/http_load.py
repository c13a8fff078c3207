"""An enqueue load over HTTP for the failover scenarios (16 and 17): one thread, one queue.

Each request goes on a new connection, so a request stuck on a dead Redis holds up no other
thread's client; every answer is remembered with the moments it was sent and answered (wall
clock, to compare with workerd's log times and the journal's).
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

from tests.faults.harness import journaled_body
from tests.support.gunicorn import Gunicorn


class QueueLoad:
    """POST /enqueue of a journaled job every `pace` seconds from a thread; remember answers.

    `queue`: the queue to enqueue to (None: the default queue). `keyed`: each enqueue carries
    a fresh Idempotency-Key, as a client that may resend does (the keyed path writes the key
    beside the job: it must fail over as the job does).
    """

    def __init__(
        self,
        gateway: Gunicorn,
        journal: Path,
        queue: str | None = None,
        *,
        pace: float,
        job_sleep: float,
        http_timeout: float,
        keyed: bool = False,
    ) -> None:
        self.gateway, self.journal, self.queue = gateway, journal, queue
        self.pace, self.job_sleep, self.http_timeout, self.keyed = (
            pace,
            job_sleep,
            http_timeout,
            keyed,
        )
        self.acked: list[tuple[float, float, str]] = []  # (sent, answered, job id)
        self.refused: list[tuple[float, int]] = []  # (sent, status; 0: no answer)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        body = journaled_body(self.journal, self.job_sleep)
        if self.queue is not None:
            body["queue"] = self.queue
        while not self.stop.wait(self.pace):  # the load's cadence, not a synchronisation
            headers = {"Idempotency-Key": uuid.uuid4().hex} if self.keyed else None
            sent = time.time()
            try:
                status, _, doc = self.gateway.request(
                    "POST", "/enqueue", body, headers=headers, timeout=self.http_timeout
                )
            except OSError:
                self.refused.append((sent, 0))
                continue
            if 200 <= status < 300:
                self.acked.append((sent, time.time(), doc["id"]))
            else:
                self.refused.append((sent, status))

    def first_ack_sent_after(self, moment: float) -> float | None:
        """Return when the first acknowledged enqueue sent after `moment` was answered."""
        return min((answered for sent, answered, _ in self.acked if sent >= moment), default=None)

    def acked_between(self, start: float, end: float) -> int:
        """Return how many enqueues were answered 2xx between two moments."""
        return sum(1 for _, answered, _ in self.acked if start <= answered <= end)

    def refused_sent_after(self, moment: float) -> int:
        """Return how many enqueues sent after `moment` got no 2xx."""
        return sum(1 for sent, _ in self.refused if sent >= moment)
