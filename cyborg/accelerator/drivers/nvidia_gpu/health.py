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

"""Health signals of NVIDIA GPUs from ``nvidia-smi`` and the kernel log.

Each query is its own command, so that a field a driver version does not
know (which fails the whole command) only loses that signal. A missing,
failing or hanging tool gives no signal at all: the driver then judges
from sysfs alone. Nothing here changes a GPU's settings.
"""

from __future__ import annotations

from collections.abc import Callable
import re

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.domain import remediation

NVIDIA_SMI = 'nvidia-smi'
# Application-level Xids (NVIDIA's own device plugins ignore them).
BENIGN_XIDS = frozenset([13, 31, 43, 45, 68, 109])
# clocks_throttle_reasons.active bits that mean the hardware slows the
# GPU down: HW slowdown, HW thermal slowdown, HW power brake.
HW_THROTTLE_MASK = 0x08 | 0x40 | 0x80
_XID = re.compile(r'NVRM: Xid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]{2}):'
                  r'([0-9a-fA-F]{2})\): (\d+)')


class ToolUnusable(Exception):
    """nvidia-smi is missing, hangs or fails: no signal from it."""


def _yes(value: str | None) -> bool:
    return (value or '').strip().lower() == 'yes'


def _ecc(value: str | None) -> bool:
    return value is not None and value.isdigit() and int(value) > 0


def _throttled(value: str | None) -> bool:
    try:
        return bool(int(value or '', 16) & HW_THROTTLE_MASK)
    except ValueError:
        return False


# (fields after pci.bus_id, judge of the row -> reason or None)
QUERIES: list[tuple[tuple[str, ...], Callable]] = [
    (('ecc.errors.uncorrected.volatile.total',),
     lambda r: 'uncorrected ECC errors' if _ecc(r[0]) else None),
    (('retired_pages.pending',),
     lambda r: 'retired pages pending' if _yes(r[0]) else None),
    (('remapped_rows.pending', 'remapped_rows.failure'),
     lambda r: ('row remapping failed' if _yes(r[1]) else
                'row remapping pending' if _yes(r[0]) else None)),
    (('clocks_throttle_reasons.active',),
     lambda r: 'hardware slowdown' if _throttled(r[0]) else None),
]


def _query(runner: runner_mod.Runner, fields: tuple[str, ...],
           timeout: float) -> dict[pci.PCIAddress, list[str | None]]:
    """Rows of one query by GPU address; {} when the query fails.

    Raises :class:`ToolUnusable` when the tool is missing or hangs.
    """
    columns = ('pci.bus_id',) + fields
    argv = [NVIDIA_SMI, '--query-gpu=' + ','.join(columns),
            '--format=csv,noheader,nounits']
    try:
        result = runner.run(argv, timeout=timeout)
    except host_errors.ToolError as exc:
        raise ToolUnusable(str(exc)) from exc
    if not result.ok:
        return {}
    try:
        rows = runner_mod.parse_csv(result.stdout, fields=list(columns))
    except ValueError:
        return {}
    found = {}
    for row in rows:
        try:
            address = pci.parse_address(row['pci.bus_id'] or '')
        except host_errors.InvalidPCIAddress:
            continue
        found[address] = [row[f] for f in fields]
    return found


def smi_problems(runner: runner_mod.Runner, timeout: float
                 ) -> dict[pci.PCIAddress, list[str]]:
    """What nvidia-smi says is wrong, per GPU (GPUs it does not list or
    that are fine are absent). Raises :class:`ToolUnusable` when the
    first query cannot run at all."""
    problems: dict[pci.PCIAddress, list[str]] = {}
    for number, (fields, judge) in enumerate(QUERIES):
        try:
            rows = _query(runner, fields, timeout)
        except ToolUnusable:
            if number == 0:
                raise
            break  # it hangs now: keep what it said so far
        for address, values in rows.items():
            reason = judge(values)
            if reason:
                problems.setdefault(address, []).append(reason)
    return problems


def gpu_names(runner: runner_mod.Runner, timeout: float
              ) -> dict[pci.PCIAddress, str]:
    """Product names by GPU address; {} when nvidia-smi cannot tell."""
    try:
        rows = _query(runner, ('name',), timeout)
    except ToolUnusable:
        return {}
    return {address: values[0] for address, values in rows.items()
            if values[0]}


#: The utilization query (read-only), after ``pci.bus_id``.
UTILIZATION_FIELDS = ('utilization.gpu', 'memory.used', 'memory.total')


def _number(value: str | None, kind: type) -> int | float | None:
    """A value of ``nounits`` output; None for ``[N/A]``,
    ``[Not Supported]`` and anything else that is not a number."""
    try:
        return kind(value or '')
    except ValueError:
        return None


def gpu_utilization(runner: runner_mod.Runner, timeout: float
                    ) -> dict[pci.PCIAddress, dict[str, int | float]]:
    """``gpu_percent``, ``memory_used_mib`` and ``memory_total_mib`` per
    GPU address from ``nvidia-smi --query-gpu=pci.bus_id,
    utilization.gpu,memory.used,memory.total``; a value nvidia-smi does
    not support is left out, and {} when the tool cannot tell."""
    try:
        rows = _query(runner, UTILIZATION_FIELDS, timeout)
    except ToolUnusable:
        return {}
    found = {}
    for address, (busy, used, total) in rows.items():
        metrics = {name: value for name, value in (
            ('gpu_percent', _number(busy, float)),
            ('memory_used_mib', _number(used, int)),
            ('memory_total_mib', _number(total, int))) if value is not None}
        if metrics:
            found[address] = metrics
    return found


def parse_xids(text: str) -> dict[tuple[int, int, int], set[int]]:
    """Xid codes by (domain, bus, slot) from kernel log lines
    ``NVRM: Xid (PCI:0000:3b:00): 79, ...`` (no function)."""
    found: dict[tuple[int, int, int], set[int]] = {}
    for match in _XID.finditer(text):
        key = (int(match.group(1), 16), int(match.group(2), 16),
               int(match.group(3), 16))
        found.setdefault(key, set()).add(int(match.group(4)))
    return found


def fatal_xids(runner: runner_mod.Runner, timeout: float
               ) -> dict[tuple[int, int, int], list[int]]:
    """Device-fatal Xids of the kernel log by (domain, bus, slot); {}
    when the log cannot be read."""
    try:
        result = runner.run(['dmesg'], timeout=timeout)
    except host_errors.ToolError:
        return {}
    if not result.ok:
        return {}
    return {slot: sorted(codes - BENIGN_XIDS)
            for slot, codes in parse_xids(result.stdout).items()
            if codes - BENIGN_XIDS}


_XID_LINE = re.compile(r'^.*NVRM: Xid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]{2}):'
                       r'([0-9a-fA-F]{2})\): (\d+)(.*)$', re.MULTILINE)
_RECOVERY_ACTION = re.compile(r'\bto 0x[0-9a-fA-F]+ \(([^)]*)\)')


def xid_signal(code: int, detail: str) -> str:
    """The remediation signal of an Xid: ``xid.48``; Xid 154 (the
    recovery action the GPU driver wants now) names its new action:
    ``xid.154.gpu-reset-required``, ``xid.154.none``..."""
    if code == 154:
        match = _RECOVERY_ACTION.search(detail)
        if match:
            action = re.sub(r'[^a-z0-9]+', '-',
                            match.group(1).lower()).strip('-')
            if action:
                return 'xid.154.%s' % action[:40]
    return 'xid.%d' % code


class XidReader:
    """The Xids of kernel log lines not seen at the previous reading.

    The kernel log keeps a line until the buffer wraps or a reboot, so
    every reading would show an old Xid again; only lines that were not
    in the previous reading are signals. The first reading gives every
    Xid of the log (since boot).
    """

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def read(self, runner: runner_mod.Runner, timeout: float
             ) -> dict[tuple[int, int, int], list[remediation.Signal]] | None:
        """Signals by (domain, bus, slot); None when the log cannot be
        read (what was seen is kept)."""
        try:
            result = runner.run(['dmesg'], timeout=timeout)
        except host_errors.ToolError:
            return None
        if not result.ok:
            return None
        found: dict[tuple[int, int, int], list[remediation.Signal]] = {}
        lines = set()
        for match in _XID_LINE.finditer(result.stdout):
            line = match.group(0)
            lines.add(line)
            if line in self._seen:
                continue
            slot = (int(match.group(1), 16), int(match.group(2), 16),
                    int(match.group(3), 16))
            code = int(match.group(4))
            detail = match.group(5).lstrip(', ').strip()
            found.setdefault(slot, []).append(remediation.Signal(
                xid_signal(code, detail),
                ('Xid %d: %s' % (code, detail)) if detail else
                'Xid %d' % code))
        self._seen = lines
        return found


def gpu_reset(runner: runner_mod.Runner, address: str,
              timeout: float) -> None:
    """``nvidia-smi --gpu-reset -i ADDRESS``; ResetFailed with what it
    said when it fails."""
    try:
        result = runner.run([NVIDIA_SMI, '--gpu-reset', '-i', address],
                            timeout=timeout)
    except host_errors.ToolError as exc:
        raise errors.ResetFailed(device=address, reason=str(exc))
    if not result.ok:
        said = (result.stderr.strip() or result.stdout.strip()
                or 'exit status %d' % result.returncode)
        raise errors.ResetFailed(device=address, reason='nvidia-smi: %s'
                                 % said.splitlines()[-1])


def slot_of(address: pci.PCIAddress) -> tuple[int, int, int]:
    return (address.domain, address.bus, address.slot)
