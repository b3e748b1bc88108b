# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""CPU time of the processes a benchmark measures."""

import psutil


def process_cpu(pids) -> float:
    """CPU seconds used so far by ``pids`` and their descendants, each
    process counted once.

    Counts the children that have exited too (PostgreSQL backends of
    closed connections, restarted gunicorn workers): their parent's
    ``children_*`` times, so that the total never goes down.
    """
    procs: dict[int, psutil.Process] = {}
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            for member in [proc] + proc.children(recursive=True):
                procs.setdefault(member.pid, member)
        except psutil.NoSuchProcess:
            continue
    total = 0.0
    for proc in procs.values():
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += (times.user + times.system + times.children_user
                  + times.children_system)
    return total


def own_cpu() -> float:
    """CPU seconds of this process alone (its threads, not its
    children)."""
    times = psutil.Process().cpu_times()
    return times.user + times.system


def pids_with(text: str) -> list[int]:
    """The processes whose command line contains ``text`` (e.g. the
    PostgreSQL server and backends of a data directory)."""
    return [p.pid for p in psutil.process_iter(['cmdline'])
            if text in ' '.join(p.info['cmdline'] or [])]


def reference_loop_ms(iterations: int = 5_000_000) -> float:
    """CPU milliseconds of a fixed pure-Python loop: how fast this
    machine is right now (shared machines vary by 2x and more), so that
    only runs at similar values are compared."""
    started = own_cpu()
    total = 0
    for number in range(iterations):
        total += number * number
    return (own_cpu() - started) * 1000
