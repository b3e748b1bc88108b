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

"""MIG-backed vGPUs: a GPU instance, then the vGPU type that fits it.

A MIG-backed vGPU type (``NVIDIA A100-3-20C``, ``H200X-1-18C``) runs in
a GPU instance of the MIG profile its name carries (``3g.20gb``,
``1g.18gb``). :class:`MigVgpus` creates the GPU instance through
``nvidia-smi mig`` (the driver's runner), then the vGPU on a free
virtual function: with vGPU 17+ it writes the type to the VF's
``current_vgpu_type`` (:data:`VGPU_TYPE`); with vGPU 13 to 16 it creates
an mdev of the type on the VF, whose uuid is the partition's key
(:data:`MDEV`; NVIDIA's vGPU manager puts it in a free GPU instance of
its size). Release does the reverse.

Both are durable: before the hardware is touched, the intended
partition is written to a journal (one JSON file per partition under
``<state_path>/nvidia_gpu/mig``), and each step that changed the
device is recorded as soon as it is done. :meth:`MigVgpus.roll_back`
undoes a creation a killed agent left half done, including a GPU
instance created but not yet recorded: on a GPU the driver partitions,
every GPU instance belongs to a journal entry.
"""

from __future__ import annotations

from collections.abc import Iterator
import contextlib
import functools
import json
import os
import re
import threading
from typing import Callable
from typing import Concatenate
from typing import ParamSpec
from typing import TypeVar

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.nvidia_gpu import mig
from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import mdev
from cyborg.accelerator.drivers.utils import pci
from cyborg.accelerator.drivers.utils import sysfs

# <board>-<compute slices>-<memory GB>C, ME for media extensions.
_MIG_TYPE = re.compile(r'-(\d+)-(\d+)C(ME)?$')
STEP_INTENT = 'intent'
STEP_INSTANCE = 'instance'
STEP_DONE = 'done'
STEP_DESTROYING = 'destroying'
#: How the vGPU of a partition is made on its VF: the type id written to
#: ``nvidia/current_vgpu_type`` (an int), or an mdev of the type (its id,
#: ``nvidia-474``) whose uuid is the partition's key.
VGPU_TYPE = 'vgpu_type'
MDEV = 'mdev'


class PartitionError(errors.DriverError):
    """A partition could not be created or destroyed."""


def mig_profile_name(vgpu_type_name: str) -> str | None:
    """``NVIDIA A100-3-20C`` -> ``3g.20gb``, ``A100-1-5CME`` ->
    ``1g.5gb+me``; None for a time-sliced type (``A100-20C``)."""
    match = _MIG_TYPE.search(vgpu_type_name.strip())
    if match is None:
        return None
    compute, memory, media = match.groups()
    return '%sg.%sgb%s' % (compute, memory, '+me' if media else '')


class Journal:
    """One JSON file per partition, replaced atomically."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def _path(self, key: str) -> str:
        if not re.fullmatch(r'[A-Za-z0-9_.-]+', key):
            raise ValueError('invalid partition key %r' % key)
        return os.path.join(self.directory, key + '.json')

    def write(self, key: str, entry: dict) -> None:
        os.makedirs(self.directory, exist_ok=True)
        path = self._path(key)
        with open(path + '.tmp', 'w') as f:
            json.dump(entry, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(path + '.tmp', path)

    def read(self, key: str) -> dict | None:
        try:
            with open(self._path(key)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def remove(self, key: str) -> None:
        try:
            os.unlink(self._path(key))
        except FileNotFoundError:
            pass

    def entries(self) -> dict[str, dict]:
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            return {}
        found = {}
        for name in names:
            if name.endswith('.json'):
                entry = self.read(name[:-len('.json')])
                if entry is not None:
                    found[name[:-len('.json')]] = entry
        return found


_P = ParamSpec('_P')
_R = TypeVar('_R')


def _serialized(method: Callable[Concatenate[MigVgpus, _P], _R]
                ) -> Callable[Concatenate[MigVgpus, _P], _R]:
    """One creation, destruction or restoration at a time: a roll-back
    destroys the GPU instances no journal entry records, which another
    creation's instance is until its id is recorded."""
    @functools.wraps(method)
    def locked(self: MigVgpus, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


class MigVgpus:
    """Creates and destroys MIG-backed vGPUs, journaled."""

    def __init__(self, tool: mig.MigTool, host: sysfs.HostRoot,
                 journal_dir: str) -> None:
        self.tool = tool
        self._host = host
        self.journal = Journal(journal_dir)
        # Reentrant: a creation rolls back through destroy().
        self._lock = threading.RLock()

    @_serialized
    def create(self, key: str, gpu: int, profile_name: str,
               vf: pci.PCIAddress, type_id: int | str,
               kind: str = VGPU_TYPE) -> mig.GpuInstance:
        """The partition ``key``: a GPU instance of ``profile_name`` on
        GPU index ``gpu`` and a vGPU of type ``type_id`` on ``vf``, made
        as ``kind`` says (:data:`VGPU_TYPE` or :data:`MDEV`). A key
        already done is returned as it is (a repeated bind)."""
        entry = self.journal.read(key)
        if entry is not None and entry['step'] == STEP_DONE:
            return self._instance(entry)
        if entry is not None:
            self.roll_back(key)
        profile = next((p for p in self.tool.profiles(gpu)
                        if p.name == profile_name), None)
        if profile is None:
            raise PartitionError('GPU %d offers no MIG profile %s'
                                 % (gpu, profile_name))
        entry = {'gpu': gpu, 'profile': profile.id, 'vf': str(vf),
                 'type': type_id, 'kind': kind, 'gi': None,
                 'step': STEP_INTENT}
        self.journal.write(key, entry)
        try:
            gi = self.tool.create_gpu_instance(gpu, profile.id)
            entry.update(gi=gi.id, step=STEP_INSTANCE)
            self.journal.write(key, entry)
            self._start_vgpu(key, entry)
        except (mig.MigCommandError, PartitionError) as exc:
            self.roll_back(key)
            raise PartitionError('cannot create a %s vGPU on GPU %d: %s'
                                 % (profile_name, gpu, exc))
        entry['step'] = STEP_DONE
        self.journal.write(key, entry)
        return gi

    @_serialized
    def destroy(self, key: str) -> None:
        """Remove the partition ``key``; one not journaled is gone."""
        entry = self.journal.read(key)
        if entry is None:
            return
        if entry['step'] == STEP_DONE:
            # Recorded first: a destruction cut short is finished at the
            # next start, before any new instance can reuse the id.
            entry['step'] = STEP_DESTROYING
            self.journal.write(key, entry)
        try:
            self._stop_vgpu(key, entry)
            if entry['gi'] is not None:
                self.tool.destroy_gpu_instance(entry['gpu'], entry['gi'])
            else:
                self._destroy_unrecorded(entry['gpu'], entry['profile'])
        except mig.MigCommandError as exc:
            raise PartitionError('cannot destroy partition %s: %s'
                                 % (key, exc))
        self.journal.remove(key)

    def roll_back(self, key: str) -> None:
        """Undo what a half-done creation of ``key`` changed."""
        self.destroy(key)

    @_serialized
    def roll_back_unfinished(self) -> list[str]:
        """Roll back every creation or destruction the journal shows
        unfinished (at agent start); the keys rolled back."""
        keys = [k for k, e in self.journal.entries().items()
                if e['step'] != STEP_DONE]
        for key in keys:
            self.roll_back(key)
        return keys

    @contextlib.contextmanager
    def quiescent(self) -> Iterator[None]:
        """No creation, destruction or restoration runs in this block:
        what it reads of the device (profiles' free counts, instances)
        is of one moment."""
        with self._lock:
            yield

    def pending(self) -> dict[int, set[int]]:
        """The profile ids each GPU has partitions of, journaled at any
        step (a creation under way included), by GPU index."""
        found: dict[int, set[int]] = {}
        for entry in self.journal.entries().values():
            found.setdefault(entry['gpu'], set()).add(entry['profile'])
        return found

    def orphans(self, gpus: list[int]) -> list[mig.GpuInstance]:
        """The GPU instances of ``gpus`` that no journal entry records
        (id and profile; at start, after :meth:`roll_back_unfinished`)."""
        held = {(e['gpu'], e['gi'], e['profile'])
                for e in self.journal.entries().values()}
        return [gi for gpu in gpus for gi in self.tool.gpu_instances(gpu)
                if (gpu, gi.id, gi.profile_id) not in held]

    @_serialized
    def restore(self, failed: dict[str, str] | None = None) -> list[str]:
        """Recreate the finished partitions the device lost (a host
        reboot loses every GPU instance and vGPU): a new GPU instance of
        the entry's profile, then the VF's type. The keys restored.

        With ``failed``, a partition that cannot be recreated is left
        as it is, its key and why in ``failed``, and the others are
        restored (the agent reports it as a handle it could not
        restore); without, the first failure raises."""
        restored = []
        listed: dict[int, dict[int, int]] = {}
        # Made here: an id the device reuses is no entry's old instance.
        made: set[tuple[int, int]] = set()
        for key, entry in self.journal.entries().items():
            if entry['step'] != STEP_DONE:
                continue
            try:
                if self._restore_entry(key, entry, listed, made):
                    restored.append(key)
            except (mig.MigCommandError, PartitionError) as exc:
                if failed is None:
                    raise
                failed[key] = str(exc)
        return restored

    def _restore_entry(self, key: str, entry: dict,
                       listed: dict[int, dict[int, int]],
                       made: set[tuple[int, int]]) -> bool:
        """Recreate one partition if the device lost its instance;
        whether it did."""
        gpu = entry['gpu']
        if gpu not in listed:
            listed[gpu] = {gi.id: gi.profile_id
                           for gi in self.tool.gpu_instances(gpu)}
        if (listed[gpu].get(entry['gi']) == entry['profile']
                and (gpu, entry['gi']) not in made):
            self._start_vgpu(key, entry)  # the vGPU alone was lost
            return False
        gi = self.tool.create_gpu_instance(gpu, entry['profile'])
        listed[gpu][gi.id] = gi.profile_id
        made.add((gpu, gi.id))
        self.journal.write(key, dict(entry, gi=gi.id))
        self._start_vgpu(key, entry)
        return True

    def _instance(self, entry: dict) -> mig.GpuInstance:
        for gi in self.tool.gpu_instances(entry['gpu']):
            if gi.id == entry['gi']:
                return gi
        raise PartitionError('GPU instance %s of GPU %s is gone'
                             % (entry['gi'], entry['gpu']))

    def _destroy_unrecorded(self, gpu: int, profile_id: int) -> None:
        """A GPU instance created after the intent was written and
        before its id was: the instances of the profile no journal
        entry records."""
        held = {e['gi'] for e in self.journal.entries().values()
                if e['gpu'] == gpu}
        for gi in self.tool.gpu_instances(gpu):
            if gi.profile_id == profile_id and gi.id not in held:
                self.tool.destroy_gpu_instance(gpu, gi.id)

    def _start_vgpu(self, key: str, entry: dict) -> None:
        """The partition's vGPU on its VF (kept if it is there)."""
        vf = pci.parse_address(entry['vf'])
        if entry.get('kind', VGPU_TYPE) == MDEV:
            self._create_mdev(key, vf, str(entry['type']))
        else:
            self._set_type(vf, int(entry['type']))

    def _stop_vgpu(self, key: str, entry: dict) -> None:
        """Remove the partition's vGPU from its VF (none is fine);
        raises :class:`~mig.MigCommandError`."""
        vf = pci.parse_address(entry['vf'])
        if entry.get('kind', VGPU_TYPE) == MDEV:
            self._remove_mdev(key)
        else:
            self._reset_type(vf, int(entry['type']))

    def _create_mdev(self, key: str, vf: pci.PCIAddress,
                     type_id: str) -> None:
        try:
            if not mdev.mdev_exists(self._host, key):
                mdev.create_mdev(self._host, vf, type_id, key)
        except (host_errors.HostError, ValueError) as exc:
            raise PartitionError('cannot create mdev %s of type %s on %s: '
                                 '%s' % (key, type_id, vf, exc))

    def _remove_mdev(self, key: str) -> None:
        try:
            mdev.remove_mdev_if_exists(self._host, key)
        except (host_errors.HostError, ValueError) as exc:
            raise mig.MigCommandError('cannot remove mdev %s: %s'
                                      % (key, exc))

    def _set_type(self, vf: pci.PCIAddress, type_id: int) -> None:
        try:
            current = mdev.current_vgpu_type(self._host, vf)
            if current == type_id:
                return
            if current:
                raise PartitionError('VF %s runs vGPU type %d' % (vf,
                                                                  current))
            mdev.set_vgpu_type(self._host, vf, type_id)
        except (host_errors.HostError, ValueError) as exc:
            raise PartitionError('cannot set vGPU type %d on %s: %s'
                                 % (type_id, vf, exc))

    def _reset_type(self, vf: pci.PCIAddress, type_id: int) -> None:
        try:
            if mdev.current_vgpu_type(self._host, vf) == type_id:
                mdev.set_vgpu_type(self._host, vf, 0)
        except (host_errors.HostError, ValueError) as exc:
            raise mig.MigCommandError('cannot reset the vGPU type of %s: '
                                      '%s' % (vf, exc))
