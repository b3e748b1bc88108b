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

"""MIG GPU and compute instances through ``nvidia-smi mig``.

Everything about a GPU's partitions comes from the device: the profiles
(id, name, free and total instances, memory) from ``nvidia-smi mig
-lgip``, their allowed placements from ``-lgipp``, the instances from
``-lgi`` and ``-lci``. No table of profiles lives in the code: a GPU
model NVIDIA ships tomorrow works as it reports itself.

:class:`MigTool` runs the commands through the driver's runner (so that
tests reach only the fake ``nvidia-smi``) and parses NVIDIA's output;
a failure raises :class:`MigCommandError` with nvidia-smi's reason.
:func:`still_creatable` and :func:`homogeneous_capacity` are the
capacity rules of the partition modes.
"""

from __future__ import annotations

import dataclasses
import re

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import runner as runner_mod

NVIDIA_SMI = 'nvidia-smi'
MODE_QUERY = ('--query-gpu=index,pci.bus_id,mig.mode.current,'
              'mig.mode.pending', '--format=csv,noheader')
# "Not Found" answers of listings with nothing to list (exit status 6).
_NONE_FOUND = ('No GPU instances found', 'No compute instances found')
_NOT_ENABLED = 'No MIG-enabled devices found'

_LGIP = re.compile(r'^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+'
                   r'([\d.]+)\s')
_LGIPP = re.compile(r'^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:'
                    r'\s*\{([\d,\s]*)\}:(\d+)')
_LGI = re.compile(r'^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+'
                  r'(\d+):(\d+)\s*\|')
_LCI = re.compile(r'^\|\s*(\d+)\s+(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+'
                  r'(\d+):(\d+)\s*\|')
_CREATED_GI = re.compile(r'Successfully created GPU instance ID\s+(\d+) on '
                         r'GPU\s+(\d+) using profile MIG (\S+) \(ID\s+(\d+)\)')


class MigCommandError(errors.DriverError):
    """``nvidia-smi mig`` could not do it (or could not be run)."""


class MigNotEnabled(MigCommandError):
    """The GPU does not run in MIG mode."""


@dataclasses.dataclass(frozen=True)
class Placement:
    start: int  # first memory slice
    size: int   # memory slices

    def slices(self) -> range:
        return range(self.start, self.start + self.size)


@dataclasses.dataclass(frozen=True)
class GiProfile:
    """A GPU instance profile as the GPU reports it."""

    gpu: int
    id: int
    name: str  # 3g.20gb
    free: int  # instances that can still be created now
    total: int
    memory_gib: float
    placements: tuple[Placement, ...] = ()


@dataclasses.dataclass(frozen=True)
class GpuInstance:
    gpu: int
    id: int
    profile_id: int
    name: str
    placement: Placement


@dataclasses.dataclass(frozen=True)
class ComputeInstance:
    gpu: int
    gpu_instance: int
    id: int
    profile_id: int
    name: str
    placement: Placement


def parse_lgip(text: str) -> list[GiProfile]:
    """``nvidia-smi mig -lgip``: one profile per table row (its second
    line, copy engines and media units, is not needed)."""
    found = []
    for line in text.splitlines():
        match = _LGIP.match(line)
        if match:
            gpu, name, pid, free, total, memory = match.groups()
            found.append(GiProfile(int(gpu), int(pid), name, int(free),
                                   int(total), float(memory)))
    return found


def parse_lgipp(text: str) -> dict[tuple[int, int], tuple[Placement, ...]]:
    """``nvidia-smi mig -lgipp``: the placements of each (GPU, profile)."""
    found = {}
    for line in text.splitlines():
        match = _LGIPP.match(line.strip())
        if match:
            gpu, pid, starts, size = match.groups()
            found[(int(gpu), int(pid))] = tuple(
                Placement(int(s), int(size))
                for s in starts.replace(' ', '').split(',') if s)
    return found


def parse_lgi(text: str) -> list[GpuInstance]:
    found = []
    for line in text.splitlines():
        match = _LGI.match(line)
        if match:
            gpu, name, pid, gi, start, size = match.groups()
            found.append(GpuInstance(int(gpu), int(gi), int(pid), name,
                                     Placement(int(start), int(size))))
    return found


def parse_lci(text: str) -> list[ComputeInstance]:
    found = []
    for line in text.splitlines():
        match = _LCI.match(line)
        if match:
            gpu, gi, name, pid, ci, start, size = match.groups()
            found.append(ComputeInstance(int(gpu), int(gi), int(ci),
                                         int(pid), name,
                                         Placement(int(start), int(size))))
    return found


def still_creatable(profile: GiProfile,
                    instances: list[GpuInstance]) -> int:
    """How many more instances of ``profile`` fit beside ``instances``,
    from the device's placements: the most non-overlapping free
    placements (earliest end first is optimal for intervals), within
    the profile's total. Agrees with the ``free`` column of ``-lgip``,
    which is what :class:`MigTool` reports; used where a layout is
    planned before it is created."""
    used = {s for gi in instances for s in gi.placement.slices()}
    found = 0
    for placement in sorted(profile.placements,
                            key=lambda p: p.start + p.size):
        span = set(placement.slices())
        if not span & used:
            used |= span
            found += 1
    held = sum(1 for gi in instances if gi.profile_id == profile.id)
    return max(0, min(found, profile.total - held))


def homogeneous_capacity(profile: GiProfile,
                         instances: list[GpuInstance]) -> int | None:
    """The inventory total of a GPU serving only ``profile``: the
    instances it holds plus those still creatable, so that everything
    Placement may grant can be created. None when the GPU holds
    instances of another profile (it serves none until they are gone).
    """
    if any(gi.profile_id != profile.id for gi in instances):
        return None
    return len(instances) + profile.free


class MigTool:
    """``nvidia-smi mig`` through a driver's runner."""

    def __init__(self, runner: runner_mod.Runner, timeout: float) -> None:
        self._runner = runner
        self._timeout = timeout

    def _run(self, args: list[str], gpu: int | None = None,
             empty_ok: bool = False) -> str:
        argv = [NVIDIA_SMI, 'mig'] + args
        if gpu is not None:
            argv += ['-i', str(gpu)]
        try:
            result = self._runner.run(argv, timeout=self._timeout)
        except host_errors.ToolError as exc:
            raise MigCommandError(str(exc)) from exc
        text = (result.stdout + result.stderr).strip()
        # Driver 580 lists instances of a GPU not in MIG mode with exit
        # status 0 and this line (seen on a real H200): the text decides.
        if text.startswith(_NOT_ENABLED):
            raise MigNotEnabled('GPU %s does not run in MIG mode'
                                % ('(all)' if gpu is None else gpu))
        if result.ok:
            return result.stdout
        if empty_ok and text.startswith(_NONE_FOUND):
            return ''
        raise MigCommandError('%s failed (exit status %d): %s' % (
            ' '.join(argv), result.returncode,
            text.splitlines()[-1] if text else 'no output'))

    def mig_gpus(self) -> dict[pci.PCIAddress, int]:
        """The index of each GPU whose current MIG mode is enabled, by
        PCI address (read-only)."""
        try:
            result = self._runner.run([NVIDIA_SMI, *MODE_QUERY],
                                      timeout=self._timeout)
        except host_errors.ToolError as exc:
            raise MigCommandError(str(exc)) from exc
        if not result.ok:
            raise MigCommandError('MIG mode query failed: %s'
                                  % result.stderr.strip())
        found = {}
        for row in result.stdout.splitlines():
            cells = [c.strip() for c in row.split(',')]
            if len(cells) < 3 or not cells[0].isdigit() \
                    or cells[2] != 'Enabled':
                continue
            try:
                found[pci.parse_address(cells[1])] = int(cells[0])
            except host_errors.InvalidPCIAddress:
                continue
        return found

    def profiles(self, gpu: int) -> list[GiProfile]:
        """The GPU's profiles with free counts and placements."""
        placements = parse_lgipp(self._run(['-lgipp'], gpu))
        return [dataclasses.replace(
            p, placements=placements.get((p.gpu, p.id), ()))
            for p in parse_lgip(self._run(['-lgip'], gpu))]

    def gpu_instances(self, gpu: int) -> list[GpuInstance]:
        return parse_lgi(self._run(['-lgi'], gpu, empty_ok=True))

    def compute_instances(self, gpu: int) -> list[ComputeInstance]:
        return parse_lci(self._run(['-lci'], gpu, empty_ok=True))

    def create_gpu_instance(self, gpu: int, profile_id: int,
                            start: int | None = None,
                            compute_instance: bool = False) -> GpuInstance:
        """Create one GPU instance (at placement ``start``, or where
        NVML chooses) and, if asked, its default compute instance."""
        spec = ('%d' % profile_id if start is None
                else '%d:%d' % (profile_id, start))
        args = ['-cgi', spec] + (['-C'] if compute_instance else [])
        out = self._run(args, gpu)
        match = _CREATED_GI.search(out)
        if match is None:
            raise MigCommandError('nvidia-smi mig -cgi %s on GPU %d: no '
                                  'instance id in %r' % (spec, gpu, out))
        gi_id = int(match.group(1))
        for gi in self.gpu_instances(gpu):
            if gi.id == gi_id:
                return gi
        raise MigCommandError('GPU instance %d of GPU %d is not listed '
                              'after its creation' % (gi_id, gpu))

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None:
        """Destroy a GPU instance and its compute instances; one that
        is already gone is fine (a repeated release)."""
        self._run(['-dci', '-gi', str(gi_id)], gpu, empty_ok=True)
        try:
            self._run(['-dgi', '-gi', str(gi_id)], gpu)
        except MigCommandError as exc:
            if not str(exc).endswith('Not Found'):
                raise
