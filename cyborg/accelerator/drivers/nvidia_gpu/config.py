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

"""The vGPU configuration of the NVIDIA driver, checked.

:func:`load` reads ``[nvidia_gpu] enabled_vgpu_types`` and the
``[vgpu_<type>]`` groups and refuses what cannot be right on any host
(an address that is no PCI address, an address under two types, two
types without addresses); the driver then checks it against the host.
"""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from cyborg.accelerator.drivers import errors
from cyborg.accelerator.drivers.nvidia_gpu import opts as nvidia_conf
from cyborg.accelerator.drivers.utils import errors as host_errors
from cyborg.accelerator.drivers.utils import pci


class NvidiaGpuConfigError(errors.DriverConfigError):
    """The vGPU configuration cannot match this host."""

    msg_fmt = 'Invalid [nvidia_gpu] vGPU configuration: %(reason)s'


@dataclasses.dataclass(frozen=True)
class VgpuTypeConfig:
    """One enabled vGPU type and the GPUs it is configured on."""

    name: str
    addresses: tuple[pci.PCIAddress, ...]
    resource_class: str
    max_instances: int | None

    @property
    def is_default(self) -> bool:
        """A type without addresses applies to every other GPU."""
        return not self.addresses


def _addresses(type_name: str, values: list[str]) -> tuple:
    found = []
    for value in values:
        try:
            found.append(pci.parse_address(value))
        except host_errors.InvalidPCIAddress:
            raise NvidiaGpuConfigError(
                reason='[vgpu_%s] device_addresses: %r is not a PCI address'
                % (type_name, value))
    return tuple(sorted(set(found)))


def load(conf: cfg.ConfigOpts) -> list[VgpuTypeConfig]:
    """The enabled types, in configuration order; raises
    :class:`NvidiaGpuConfigError`."""
    names = [n.strip() for n in conf.nvidia_gpu.enabled_vgpu_types]
    if any(not n or '/' in n for n in names):
        raise NvidiaGpuConfigError(
            reason='enabled_vgpu_types has an empty or invalid type name')
    if len(set(names)) != len(names):
        raise NvidiaGpuConfigError(
            reason='enabled_vgpu_types names a type twice')
    nvidia_conf.register_dynamic_opts(conf)
    types = []
    for name in names:
        group = nvidia_conf.type_options(conf, name)
        types.append(VgpuTypeConfig(
            name=name, addresses=_addresses(name, group.device_addresses),
            resource_class=group.resource_class,
            max_instances=group.max_instances))
    _check_overlaps(types)
    return types


def _check_overlaps(types: list[VgpuTypeConfig]) -> None:
    owner: dict[pci.PCIAddress, str] = {}
    for vgpu_type in types:
        for address in vgpu_type.addresses:
            if address in owner:
                raise NvidiaGpuConfigError(
                    reason='GPU %s is listed for vGPU types %s and %s'
                    % (address, owner[address], vgpu_type.name))
            owner[address] = vgpu_type.name
    defaults = [t.name for t in types if t.is_default]
    if len(defaults) > 1:
        raise NvidiaGpuConfigError(
            reason='vGPU types %s have no device_addresses; at most one '
            'type may apply to every other GPU' % ', '.join(defaults))
