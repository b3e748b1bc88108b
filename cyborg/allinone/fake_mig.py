# Copyright 2026 The Cyborg Authors.
#
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


"""A fake ``nvidia-smi mig``: GPU and compute instances kept in a file.

Used by the fixture hosts of the NVIDIA GPU driver's tests, the MIG
property tests and ``tools/bench/partition_sim.py``; never by a driver.

:data:`MODELS` holds, per GPU model, the GPU instance profiles of
NVIDIA's *Multi-Instance GPU User Guide* ("Supported MIG Profiles"):
profile id, name, compute slices, memory slices, instance count and the
placements (first memory slice of each allowed position; a placement
``start:size`` occupies memory slices ``start`` to ``start + size - 1``).
NVML refuses a GPU instance whose memory slices overlap an existing
one's, which is the only conflict rule: on these models the allowed
placements never let the compute slices of non-overlapping instances
exceed the GPU's (7 on A100/H100/H200, 4 on A30), which
:func:`check_tables` verifies.

:class:`MigGpu` is one GPU's state (its instances) with the rules;
:func:`main` is the command line (``nvidia-smi mig -lgip`` ...) over a
state file, printing what NVIDIA's tool prints.
:func:`write_nvidia_smi_mig` writes a fake ``nvidia-smi`` that answers
``mig`` subcommands and the MIG mode query from that file and
everything else from the usual reply table of :mod:`.fake_tools`.
"""

from __future__ import annotations

import fcntl
import marshal
import os
import sys

# The fake nvidia-smi loads this module alone (see fake_tools._SCRIPT):
# only the standard library at import time, and as little of it as will
# do (typing.TYPE_CHECKING would import typing, about 5 ms of CPU a call;
# type checkers take any TYPE_CHECKING name as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from cyborg.allinone import fake_tools
    from cyborg.allinone.host_tree import HostTree


class _Record:
    """Equality and repr by the attributes of ``__slots__`` (what a
    dataclass would give; importing :mod:`dataclasses` pulls in
    inspect, re and enum, about 30 ms of CPU at each fake call)."""

    __slots__: tuple[str, ...] = ()

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Record) or type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return '%s(%s)' % (type(self).__name__, ', '.join(
            '%s=%r' % (name, getattr(self, name)) for name in self.__slots__))


class Profile(_Record):
    """A GPU instance profile as NVIDIA's MIG user guide lists it."""

    __slots__ = ('id', 'name', 'compute', 'memory_slices', 'memory_gib',
                 'instances', 'starts', 'sm', 'ce', 'dec', 'enc', 'jpeg',
                 'ofa', 'ci_profile')

    def __init__(self, id: int, name: str, compute: int,
                 memory_slices: int, memory_gib: str, instances: int,
                 starts: tuple[int, ...], sm: int, ce: int, dec: int = 0,
                 enc: int = 0, jpeg: int = 0, ofa: int = 0,
                 ci_profile: int = 0) -> None:
        self.id = id
        self.name = name                    # 3g.20gb
        self.compute = compute              # compute slices (the "3g")
        self.memory_slices = memory_slices  # size of each placement
        self.memory_gib = memory_gib        # as -lgip prints it
        self.instances = instances          # at most this many at once
        self.starts = starts
        self.sm = sm
        self.ce = ce
        self.dec = dec
        self.enc = enc
        self.jpeg = jpeg
        self.ofa = ofa
        #: Compute instance profile id of a compute instance using the
        #: whole GPU instance (what ``-C`` creates).
        self.ci_profile = ci_profile


class Model(_Record):
    __slots__ = ('name', 'memory_slices', 'compute_slices', 'profiles')

    def __init__(self, name: str, memory_slices: int, compute_slices: int,
                 profiles: tuple[Profile, ...]) -> None:
        self.name = name  # as nvidia-smi --query-gpu=name prints it
        self.memory_slices = memory_slices
        self.compute_slices = compute_slices
        self.profiles = profiles

    def profile(self, key: str | int) -> Profile | None:
        for profile in self.profiles:
            if str(key) in (str(profile.id), profile.name,
                            'MIG ' + profile.name):
                return profile
        return None


def _eight_slice(name: str, names: tuple[str, ...], mem: tuple[str, ...],
                 sm: tuple[int, ...]) -> Model:
    """A100, H100 and H200: 8 memory slices, 7 compute slices, the same
    profile ids and placements; names, memory and SMs differ."""
    one, one_me, one_big, two, three, four, seven = names
    return Model(name, 8, 7, (
        Profile(19, one, 1, 1, mem[0], 7, (0, 1, 2, 3, 4, 5, 6), sm[0], 1),
        Profile(20, one_me, 1, 1, mem[0], 1, (0, 1, 2, 3, 4, 5, 6), sm[0],
                1, dec=1, jpeg=1, ofa=1),
        Profile(15, one_big, 1, 2, mem[1], 4, (0, 2, 4, 6), sm[1], 1,
                dec=1),
        Profile(14, two, 2, 2, mem[1], 3, (0, 2, 4), sm[2], 2, dec=1,
                ci_profile=1),
        Profile(9, three, 3, 4, mem[2], 2, (0, 4), sm[3], 3, dec=2,
                ci_profile=2),
        Profile(5, four, 4, 4, mem[2], 1, (0,), sm[4], 4, dec=2,
                ci_profile=3),
        Profile(0, seven, 7, 8, mem[3], 1, (0,), sm[5], 7, dec=5, jpeg=1,
                ofa=1, ci_profile=4),
    ))


MODELS: dict[str, Model] = {m.name: m for m in (
    _eight_slice('NVIDIA A100-SXM4-40GB',
                 ('1g.5gb', '1g.5gb+me', '1g.10gb', '2g.10gb', '3g.20gb',
                  '4g.20gb', '7g.40gb'),
                 ('4.75', '9.62', '19.62', '39.38'),
                 (14, 14, 28, 42, 56, 98)),
    _eight_slice('NVIDIA A100-SXM4-80GB',
                 ('1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb', '3g.40gb',
                  '4g.40gb', '7g.80gb'),
                 ('9.50', '19.50', '39.25', '79.25'),
                 (14, 14, 28, 42, 56, 98)),
    _eight_slice('NVIDIA H100 80GB HBM3',
                 ('1g.10gb', '1g.10gb+me', '1g.20gb', '2g.20gb', '3g.40gb',
                  '4g.40gb', '7g.80gb'),
                 ('9.75', '19.62', '39.50', '79.25'),
                 (16, 26, 32, 60, 64, 132)),
    # As a real H200 lists them (driver 580.159.04, nvidia-smi mig
    # -lgip; tests/fixtures/nvidia_smi): its media engines differ from
    # the A100's.
    Model('NVIDIA H200', 8, 7, (
        Profile(19, '1g.18gb', 1, 1, '16.00', 7, (0, 1, 2, 3, 4, 5, 6), 16,
                1, dec=1, jpeg=1),
        Profile(20, '1g.18gb+me', 1, 1, '16.00', 1, (0, 1, 2, 3, 4, 5, 6),
                16, 1, dec=1, jpeg=1, ofa=1),
        Profile(15, '1g.35gb', 1, 2, '32.50', 4, (0, 2, 4, 6), 26, 1, dec=1,
                jpeg=1),
        Profile(14, '2g.35gb', 2, 2, '32.50', 3, (0, 2, 4), 32, 2, dec=2,
                jpeg=2, ci_profile=1),
        Profile(9, '3g.71gb', 3, 4, '69.75', 2, (0, 4), 60, 3, dec=3,
                jpeg=3, ci_profile=2),
        Profile(5, '4g.71gb', 4, 4, '69.75', 1, (0,), 64, 4, dec=4, jpeg=4,
                ci_profile=3),
        Profile(0, '7g.141gb', 7, 8, '140.00', 1, (0,), 132, 8, dec=7,
                jpeg=7, ofa=1, ci_profile=4),
    )),
    Model('NVIDIA A30', 4, 4, (
        Profile(14, '1g.6gb', 1, 1, '5.81', 4, (0, 1, 2, 3), 14, 1),
        Profile(21, '1g.6gb+me', 1, 1, '5.81', 1, (0, 1, 2, 3), 14, 1,
                dec=1, jpeg=1, ofa=1),
        Profile(5, '2g.12gb', 2, 2, '11.81', 2, (0, 2), 28, 2, dec=2,
                ci_profile=1),
        Profile(6, '2g.12gb+me', 2, 2, '11.81', 1, (0, 2), 28, 2, dec=2,
                jpeg=1, ofa=1, ci_profile=1),
        Profile(0, '4g.24gb', 4, 4, '23.69', 1, (0,), 56, 4, dec=4, jpeg=1,
                ofa=1, ci_profile=3),
    )),
)}


def check_tables() -> None:
    """Raise AssertionError if a table breaks the invariants the
    overlap rule relies on (placements inside the GPU; any set of
    non-overlapping placements within the GPU's compute slices)."""
    for model in MODELS.values():
        for profile in model.profiles:
            for start in profile.starts:
                assert start + profile.memory_slices <= model.memory_slices
                assert start % profile.memory_slices == 0
        # The most compute that non-overlapping placements can hold.
        best = [0] * (model.memory_slices + 1)
        for end in range(1, model.memory_slices + 1):
            best[end] = best[end - 1]
            for profile in model.profiles:
                for start in profile.starts:
                    if start + profile.memory_slices == end:
                        best[end] = max(best[end],
                                        best[start] + profile.compute)
        assert best[-1] <= model.compute_slices, model.name


class MigError(Exception):
    """What NVML answers; ``str()`` is nvidia-smi's reason."""


class GpuInstance(_Record):
    __slots__ = ('id', 'profile', 'start', 'size', 'cis')
    __hash__ = None  # type: ignore[assignment]  # mutable

    def __init__(self, id: int, profile: int, start: int, size: int,
                 cis: list[int] | None = None) -> None:
        self.id = id
        self.profile = profile
        self.start = start
        self.size = size
        #: Compute instance ids (each uses the whole GPU instance).
        self.cis = [] if cis is None else cis


class MigGpu(_Record):
    """One GPU's MIG state and NVML's rules for changing it."""

    __slots__ = ('index', 'model', 'mig_enabled', 'gis', 'bus_id',
                 'mdev_types')
    __hash__ = None  # type: ignore[assignment]  # mutable

    def __init__(self, index: int, model: Model, mig_enabled: bool = True,
                 gis: list[GpuInstance] | None = None, bus_id: str = '',
                 mdev_types: dict[str, str] | None = None) -> None:
        self.index = index
        self.model = model
        self.mig_enabled = mig_enabled
        self.gis = [] if gis is None else gis
        #: ``pci.bus_id`` as nvidia-smi prints it (``00000000:3B:00.0``).
        self.bus_id = bus_id
        #: The MIG-backed mdev types of the GPU's VFs (vGPU 13 to 16):
        #: the type's directory (absolute) -> the profile its vGPU runs
        #: in.
        self.mdev_types = {} if mdev_types is None else mdev_types

    def used(self) -> set[int]:
        return {s for gi in self.gis for s in range(gi.start,
                                                    gi.start + gi.size)}

    def count(self, profile: Profile) -> int:
        return sum(1 for gi in self.gis if gi.profile == profile.id)

    def fits(self, profile: Profile, start: int) -> bool:
        span = set(range(start, start + profile.memory_slices))
        return (start in profile.starts and not span & self.used()
                and self.count(profile) < profile.instances)

    def free(self, profile: Profile) -> int:
        """How many more instances of ``profile`` can be created now:
        the most non-overlapping free placements (earliest end first is
        optimal for intervals), within the profile's count."""
        used, found = self.used(), 0
        for start in profile.starts:  # ascending; all of one size
            span = set(range(start, start + profile.memory_slices))
            if not span & used:
                used |= span
                found += 1
        return min(found, profile.instances - self.count(profile))

    def create(self, profile: Profile, start: int | None = None
               ) -> GpuInstance:
        """A GPU instance at ``start``, or at the first free placement."""
        if not self.mig_enabled:
            raise MigError('Not Supported')
        starts = profile.starts if start is None else (start,)
        if start is not None and start not in profile.starts:
            raise MigError('Invalid Argument')
        for candidate in starts:
            if self.fits(profile, candidate):
                ids = {gi.id for gi in self.gis}
                gi = GpuInstance(min(set(range(1, 15)) - ids), profile.id,
                                 candidate, profile.memory_slices)
                self.gis.append(gi)
                return gi
        raise MigError('Insufficient Resources')

    def find(self, gi_id: int) -> GpuInstance:
        for gi in self.gis:
            if gi.id == gi_id:
                return gi
        raise MigError('Not Found')

    def destroy(self, gi_id: int) -> None:
        gi = self.find(gi_id)
        if gi.cis:
            raise MigError('In use by another client')
        self.gis.remove(gi)

    def create_ci(self, gi_id: int) -> int:
        gi = self.find(gi_id)
        if gi.cis:  # one compute instance over the whole GPU instance
            raise MigError('Insufficient Resources')
        gi.cis.append(0)
        return 0

    def destroy_ci(self, gi_id: int, ci_id: int) -> None:
        gi = self.find(gi_id)
        if ci_id not in gi.cis:
            raise MigError('Not Found')
        gi.cis.remove(ci_id)

    def profile_of(self, gi: GpuInstance) -> Profile:
        profile = self.model.profile(gi.profile)
        assert profile is not None
        return profile

    # State file ----------------------------------------------------------

    def to_dict(self) -> dict:
        return {'index': self.index, 'model': self.model.name,
                'mig_enabled': self.mig_enabled, 'bus_id': self.bus_id,
                'gis': [{'id': gi.id, 'profile': gi.profile,
                         'start': gi.start, 'size': gi.size,
                         'cis': gi.cis} for gi in self.gis],
                'mdev_types': self.mdev_types}

    @classmethod
    def from_dict(cls, data: dict) -> MigGpu:
        return cls(data['index'], MODELS[data['model']],
                   data['mig_enabled'],
                   [GpuInstance(**gi) for gi in data['gis']],
                   data.get('bus_id', ''), data.get('mdev_types', {}))

    # MIG-backed mdev types (vGPU 13 to 16) -------------------------------

    def refresh_mdev_types(self) -> None:
        """Write each MIG-backed mdev type's ``available_instances`` as
        NVIDIA's vGPU manager keeps it: 1 on a VF that runs no vGPU when
        the GPU has a GPU instance of the type's profile that no vGPU
        runs in, else 0."""
        running: dict[str, int] = {}
        for type_dir, profile in self.mdev_types.items():
            running[profile] = running.get(profile, 0) + len(
                os.listdir(os.path.join(type_dir, 'devices')))
        for type_dir, profile in self.mdev_types.items():
            model_profile = self.model.profile(profile)
            idle = (self.count(model_profile) if model_profile else 0) - (
                running.get(profile, 0))
            vf_types = os.path.dirname(type_dir)
            busy = any(os.listdir(os.path.join(vf_types, name, 'devices'))
                       for name in os.listdir(vf_types))
            with open(os.path.join(type_dir, 'available_instances'),
                      'w') as f:
                f.write('%d\n' % (1 if idle > 0 and not busy else 0))


def write_state(path: str, gpus: list[MigGpu]) -> None:
    """Replace the state at once: a reader without the lock (a test
    looking at the device) never sees it half written.

    In :mod:`marshal`'s format: the fake reads it at each call, and
    :mod:`json` would import re and enum first (about 15 ms of CPU).
    """
    with open(path + '.new', 'wb') as f:
        marshal.dump([g.to_dict() for g in gpus], f)
    os.replace(path + '.new', path)


def read_state(path: str) -> list[MigGpu]:
    with open(path, 'rb') as f:
        return [MigGpu.from_dict(d) for d in marshal.load(f)]


# nvidia-smi's output -------------------------------------------------------

_RULE_P = '+' + '-' * 79 + '+'
_RULE_I = '+' + '-' * 55 + '+'
NOT_ENABLED = 'No MIG-enabled devices found.\n'
_RULE_C = '+' + '-' * 68 + '+'


def _row(width: int, text: str) -> str:
    return '|' + text.ljust(width) + '|'


def lgip(gpus: list[MigGpu]) -> str:
    """``nvidia-smi mig -lgip``: the profiles, with free/total counts,
    laid out as driver 580 prints them."""
    out = [_RULE_P, _row(79, ' GPU instance profiles:'),
           _row(79, ' GPU   Name               ID    Instances   Memory     '
                'P2P    SM    DEC   ENC  '),
           _row(79, '                                Free/Total   GiB       '
                '       CE    JPEG  OFA  '),
           '|' + '=' * 79 + '|']
    for gpu in gpus:
        for p in gpu.model.profiles:
            out.append(_row(79, '%4d  %-19s%3d%6d/%-3d      %-11sNo     '
                            '%-7d%-6d%-4d' % (
                                gpu.index, 'MIG ' + p.name, p.id,
                                gpu.free(p), p.instances, p.memory_gib,
                                p.sm, p.dec, p.enc)))
            out.append(_row(79, ' ' * 61 + '%3d     %-6d%-4d'
                            % (p.ce, p.jpeg, p.ofa)))
            out.append(_RULE_P)
    return '\n'.join(out) + '\n'


def lgipp(gpus: list[MigGpu]) -> str:
    """``nvidia-smi mig -lgipp``: every possible placement per profile."""
    out = []
    for gpu in gpus:
        for p in gpu.model.profiles:
            label = 'Placements:' if len(p.starts) > 1 else 'Placement :'
            out.append('GPU %2d Profile ID %2d %s {%s}:%d' % (
                gpu.index, p.id, label, ','.join(map(str, p.starts)),
                p.memory_slices))
    return '\n'.join(out) + '\n'


def lgi(gpus: list[MigGpu]) -> str:
    out = [_RULE_I, _row(55, ' GPU instances:'),
           _row(55, ' GPU   Name             Profile  Instance   Placement'),
           _row(55, '                          ID       ID       Start:Size'),
           '|' + '=' * 55 + '|']
    for gpu in gpus:
        for gi in sorted(gpu.gis, key=lambda g: g.id):
            out.append(_row(55, ' %3d  %-16s   %3d      %3d          %d:%d'
                            % (gpu.index, 'MIG ' + gpu.profile_of(gi).name,
                               gi.profile, gi.id, gi.start, gi.size)))
            out.append(_RULE_I)
    return '\n'.join(out) + '\n'


def lci(gpus: list[MigGpu]) -> str:
    out = [_RULE_C, _row(68, ' Compute instances:'),
           _row(68, ' GPU     GPU       Name             Profile   Instance'
                '   Placement'),
           _row(68, '       Instance                       ID        ID   '
                '    Start:Size'),
           _row(68, '         ID'),
           '|' + '=' * 68 + '|']
    for gpu in gpus:
        for gi in sorted(gpu.gis, key=lambda g: g.id):
            profile = gpu.profile_of(gi)
            for ci in gi.cis:
                out.append(_row(68, ' %3d    %3d       %-16s   %3d       %3d'
                                '          0:%d' % (
                                    gpu.index, gi.id, 'MIG ' + profile.name,
                                    profile.ci_profile, ci,
                                    profile.compute)))
                out.append(_RULE_C)
    return '\n'.join(out) + '\n'


# Command line --------------------------------------------------------------

class _Usage(Exception):
    pass


def _option(args: list[str], *names: str) -> str | None:
    """The value after the first of ``names`` in ``args`` (removed)."""
    for name in names:
        if name in args:
            at = args.index(name)
            if at + 1 >= len(args):
                raise _Usage('%s needs a value' % name)
            value = args[at + 1]
            del args[at:at + 2]
            return value
    return None


def _flag(args: list[str], *names: str) -> bool:
    found = [n for n in names if n in args]
    for name in found:
        args.remove(name)
    return bool(found)


def _ints(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(v) for v in value.split(',')]
    except ValueError:
        raise _Usage('invalid id list %r' % value)


def run(gpus: list[MigGpu], argv: list[str]) -> tuple[int, str, str]:
    """One ``nvidia-smi mig ...`` (``argv`` without ``mig``): exit
    status, stdout, stderr; ``gpus`` is changed in place."""
    args = list(argv)
    try:
        selected = _ints(_option(args, '-i', '--id'))
        chosen = [g for g in gpus if selected is None or g.index in selected]
        if selected is not None and len(chosen) != len(set(selected)):
            return 6, '', 'No devices were found\n'
        # Profiles are listed whatever the MIG mode (as driver 580 does).
        if args in (['-lgip'], ['--list-gpu-instance-profiles']):
            return 0, lgip(chosen), ''
        if args in (['-lgipp'], ['--list-gpu-instance-possible-placements']):
            return 0, lgipp(chosen), ''
        enabled = [g for g in chosen if g.mig_enabled]
        if not enabled:
            # Driver 580 answers a listing so with exit status 0, and
            # anything else with 6.
            listing = args in (['-lgi'], ['--list-gpu-instances'],
                               ['-lci'], ['--list-compute-instances'])
            return (0 if listing else 6), NOT_ENABLED, ''
        gi_ids = _ints(_option(args, '-gi', '--gpu-instance-id'))
        ci_ids = _ints(_option(args, '-ci', '--compute-instance-id'))
        default_ci = _flag(args, '-C', '--default-compute-instance')
        if args in (['-lgi'], ['--list-gpu-instances']):
            if not any(g.gis for g in enabled):
                return 6, 'No GPU instances found: Not Found\n', ''
            return 0, lgi(enabled), ''
        if args in (['-lci'], ['--list-compute-instances']):
            if not any(gi.cis for g in enabled for gi in g.gis):
                return 6, 'No compute instances found: Not Found\n', ''
            return 0, lci(enabled), ''
        if len(args) == 2 and args[0] in ('-cgi', '--create-gpu-instance'):
            return _create(enabled, args[1], default_ci)
        if args in (['-dgi'], ['--destroy-gpu-instance']):
            return _destroy(enabled, gi_ids)
        if args[:1] in (['-cci'], ['--create-compute-instance']) \
                and len(args) <= 2:
            return _create_ci(enabled, gi_ids)
        if args in (['-dci'], ['--destroy-compute-instance']):
            return _destroy_ci(enabled, gi_ids, ci_ids)
    except _Usage as exc:
        return 2, '', 'nvidia-smi mig: %s\n' % exc
    return 2, '', 'nvidia-smi mig: unknown arguments: %s\n' % ' '.join(argv)


def _create(gpus: list[MigGpu], tuples: str,
            default_ci: bool) -> tuple[int, str, str]:
    """``-cgi <profile>[:<start>],...``: all on each GPU, in order."""
    out, err = [], []
    for gpu in gpus:
        for spec in tuples.split(','):
            key, _, start = spec.partition(':')
            profile = gpu.model.profile(key)
            if profile is None or (start and not start.isdigit()):
                return 2, '', 'Invalid profile tuple %r\n' % spec
            try:
                gi = gpu.create(profile, int(start) if start else None)
            except MigError as exc:
                err.append('Unable to create a GPU instance on GPU %2d '
                           'using profile %s: %s' % (gpu.index, key, exc))
                continue
            out.append('Successfully created GPU instance ID %2d on GPU %2d'
                       ' using profile MIG %s (ID %2d)'
                       % (gi.id, gpu.index, profile.name, profile.id))
            if default_ci:
                ci = gpu.create_ci(gi.id)
                out.append('Successfully created compute instance ID %2d on'
                           ' GPU %2d GPU instance ID %2d using profile MIG '
                           '%s (ID %2d)' % (ci, gpu.index, gi.id,
                                            profile.name, profile.ci_profile))
    if err:
        err.append('Failed to create GPU instances: %s'
                   % err[-1].rsplit(': ', 1)[-1])
    return _answer(out, err)


def _answer(out: list[str], err: list[str]) -> tuple[int, str, str]:
    """nvidia-smi's exit status (255 on any error) and its two outputs."""
    return (255 if err else 0, ''.join(line + '\n' for line in out),
            ''.join(line + '\n' for line in err))


def _selected(gpu: MigGpu, gi_ids: list[int] | None) -> list[int]:
    """The GPU instance ids ``-gi`` names, or all of the GPU's."""
    return gi_ids if gi_ids is not None else [gi.id for gi in gpu.gis]


def _destroy(gpus: list[MigGpu],
             gi_ids: list[int] | None) -> tuple[int, str, str]:
    out, err = [], []
    for gpu in gpus:
        for gi_id in _selected(gpu, gi_ids):
            try:
                gpu.destroy(gi_id)
            except MigError as exc:
                err.append('Unable to destroy GPU instance ID %2d from GPU '
                           '%2d: %s' % (gi_id, gpu.index, exc))
                continue
            out.append('Successfully destroyed GPU instance ID %2d from GPU '
                       '%2d' % (gi_id, gpu.index))
    if not out and not err:
        err.append('No GPU instances found: Not Found')
    elif err:
        err.append('Failed to destroy GPU instances: %s'
                   % err[-1].rsplit(': ', 1)[-1])
    return _answer(out, err)


def _create_ci(gpus: list[MigGpu],
               gi_ids: list[int] | None) -> tuple[int, str, str]:
    out, err = [], []
    for gpu in gpus:
        for gi_id in _selected(gpu, gi_ids):
            try:
                gi = gpu.find(gi_id)
                ci = gpu.create_ci(gi_id)
            except MigError as exc:
                err.append('Unable to create a compute instance on GPU %2d '
                           'GPU instance ID %2d: %s' % (gpu.index, gi_id, exc))
                continue
            profile = gpu.profile_of(gi)
            out.append('Successfully created compute instance ID %2d on GPU'
                       ' %2d GPU instance ID %2d using profile MIG %s (ID '
                       '%2d)' % (ci, gpu.index, gi_id, profile.name,
                                 profile.ci_profile))
    return _answer(out, err)


def _destroy_ci(gpus: list[MigGpu], gi_ids: list[int] | None,
                ci_ids: list[int] | None) -> tuple[int, str, str]:
    out, err = [], []
    for gpu in gpus:
        for gi in list(gpu.gis):
            if gi_ids is not None and gi.id not in gi_ids:
                continue
            for ci in list(gi.cis if ci_ids is None else ci_ids):
                try:
                    gpu.destroy_ci(gi.id, ci)
                except MigError as exc:
                    err.append('Unable to destroy compute instance ID %2d '
                               'from GPU %2d GPU instance ID %2d: %s'
                               % (ci, gpu.index, gi.id, exc))
                    continue
                out.append('Successfully destroyed compute instance ID %2d '
                           'from GPU %2d GPU instance ID %2d'
                           % (ci, gpu.index, gi.id))
    if not out and not err:
        err.append('No compute instances found: Not Found')
    return _answer(out, err)


MODE_QUERY = ('--query-gpu=index,pci.bus_id,mig.mode.current,'
              'mig.mode.pending', '--format=csv,noheader')
#: The argument lists :func:`main` answers start so: the fake
#: nvidia-smi loads this module for these only (see
#: :func:`.fake_tools.write_tool`).
HANDLES = (('mig',), MODE_QUERY)


def mode_query(gpus: list[MigGpu]) -> str:
    """The MIG mode query: ``index, bus id, current, pending`` lines."""
    return ''.join('%d, %s, %s, %s\n' % ((g.index, g.bus_id) + ((
        'Enabled',) * 2 if g.mig_enabled else ('Disabled',) * 2))
        for g in gpus)


def main(state_path: str, argv: list[str]) -> int | None:
    """The fake ``nvidia-smi``'s MIG part; None for other arguments
    (the reply table answers those)."""
    if argv[:1] != ['mig'] and tuple(argv) != MODE_QUERY:
        return None
    with open(state_path + '.lock', 'a') as lock:
        # One nvidia-smi at a time changes the state, as NVML serializes.
        fcntl.flock(lock, fcntl.LOCK_EX)
        gpus = read_state(state_path)
        if argv[:1] != ['mig']:
            sys.stdout.write(mode_query(gpus))
            return 0
        before = [gpu.to_dict() for gpu in gpus]
        rc, out, err = run(gpus, argv[1:])
        write_state(state_path, gpus)
        for gpu, was in zip(gpus, before, strict=True):
            if gpu.to_dict() != was:  # instances made or destroyed
                gpu.refresh_mdev_types()
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


def write_nvidia_smi_mig(tools_dir: str, gpus: list[fake_tools.Gpu],
                         state_path: str, models: dict[int, str],
                         sriov: bool = True) -> str:
    """A fake ``nvidia-smi`` for ``gpus`` whose GPUs of index in
    ``models`` (the model name of :data:`MODELS`) run MIG mode with no
    instances, the state kept in ``state_path``."""
    from cyborg.allinone import fake_tools
    bus_ids = {gpu.index: gpu.bus_id() for gpu in gpus}
    write_state(state_path, [MigGpu(index, MODELS[name],
                                    bus_id=bus_ids.get(index, ''))
                             for index, name in sorted(models.items())])
    return fake_tools.write_nvidia_smi(tools_dir, gpus, sriov,
                                       (__name__, 'main', state_path))


def refresh_mdev_types(state_path: str) -> None:
    """:meth:`MigGpu.refresh_mdev_types` of every GPU of the state, as
    one nvidia-smi call would (under the state's lock)."""
    with open(state_path + '.lock', 'a') as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for gpu in read_state(state_path):
            gpu.refresh_mdev_types()


def add_mig_mdev_types(tree: HostTree, state_path: str, index: int,
                       vfs: list[str],
                       types: list[tuple[str, str, str, str]]) -> None:
    """MIG-backed mdev types on ``vfs`` of GPU ``index`` (vGPU 13 to 16
    on an A100 or A30 in MIG mode): ``(type id, name, description,
    profile)`` each, their ``available_instances`` kept from the GPU
    instances the fake ``nvidia-smi`` holds and the mdevs the tree
    holds."""
    gpus = read_state(state_path)
    (gpu,) = [g for g in gpus if g.index == index]
    for vf in vfs:
        for type_id, name, description, profile in types:
            tree.add_mdev_type(vf, type_id, name, description, 0)
            gpu.mdev_types[tree.abs(tree.dev(
                vf, 'mdev_supported_types', type_id))] = profile
    write_state(state_path, gpus)
    tree.on_mdev_change(lambda: refresh_mdev_types(state_path))
    refresh_mdev_types(state_path)
