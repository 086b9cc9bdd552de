"""A job silent for longer than the heartbeat's quiet time gets lines saying what Spark runs."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from lakefs_gc.spark.runtime.heartbeat import SparkHeartbeat


def _slow(x: int) -> int:
    time.sleep(1.5)
    return x


def test_a_silent_job_gets_lines_naming_its_stage_and_tasks(spark: Any) -> None:
    lines: list[str] = []
    with SparkHeartbeat(spark, lines.append, "repo", quiet_s=0.4) as say:
        say("repo: reading")
        assert spark.sparkContext.parallelize(range(2), 2).map(_slow).collect() == [0, 1]
    after = len(lines)
    time.sleep(0.6)
    assert len(lines) == after  # nothing once the job's block has ended
    assert lines[0] == "repo: reading"
    beats = lines[1:]
    assert beats, "no heartbeat line during a 1.5 s silent job"
    stage = re.compile(
        r"repo: still working, \d+ s since the last line; "
        r"Spark stage \d+ \(.+\): [0-2]/2 tasks done, \d running"
    )
    assert any(stage.fullmatch(line) for line in beats), beats


def test_lines_said_often_enough_keep_it_quiet(spark: Any) -> None:
    lines: list[str] = []
    with SparkHeartbeat(spark, lines.append, "repo", quiet_s=0.4) as say:
        stop = threading.Event()

        def chatty() -> None:
            while not stop.wait(0.1):
                say("repo: progress")

        talker = threading.Thread(target=chatty)
        talker.start()
        try:
            spark.sparkContext.parallelize(range(2), 2).map(_slow).collect()
        finally:
            stop.set()
            talker.join()
    assert set(lines) == {"repo: progress"}


def test_without_a_stage_it_says_the_driver_works(spark: Any) -> None:
    lines: list[str] = []
    with SparkHeartbeat(spark, lines.append, "repo", quiet_s=0.3):
        time.sleep(0.8)
    assert lines and all(
        line.endswith("(no Spark stage running: the driver is working)") for line in lines
    ), lines
