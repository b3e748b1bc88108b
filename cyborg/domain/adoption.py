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

"""How rows imported from an upstream Cyborg meet our agents' reports.

An imported device is matched by (host, address) like any other. Its
deployables, named and shaped by upstream's drivers, are *foreign*: their
resource provider uuid is upstream's ``uuid3(NAMESPACE_DNS, name)``, not
the one :func:`cyborg.domain.providers.provider_uuid` derives. A reported
deployable adopts a foreign deployable of the same device when:

1. their names are equal (no upstream driver names a deployable the way
   ours do, but a deployable adopted once carries our name from then
   on); or else
2. they share a PCI function in their attach handles' info (the one
   rule that holds for every driver: both attach the same functions),
   and the reported one carries every function the imported one has in
   use (otherwise the imported one is kept as it is, ``retained``, until
   those are released). Among several candidates the one sharing most
   functions wins, then the oldest row.

Per upstream driver (upstream name -> ours, all on the same device; the
admin guide's "How agents and the conductor adopt an upstream Cyborg"
has the details):

==================  ============================  =========================
upstream driver     upstream deployable           adopted by our deployable
==================  ============================  =========================
fake_driver         ``<host>_FakeDevice``, 16     ``dddd_bb_ss_f`` (16
                    TEST_PCI handles              handles, same functions)
nvidia_gpu_driver   ``<host>_<bdf>`` (pGPU: one   ``dddd_bb_ss_f`` (pGPU) or
                    PCI handle; vGPU: MDEV        ``dddd_bb_ss_f_<type>``
                    handles on the GPU)           (vGPU) on the same GPU
intel_fpga_driver   ``<hostname>_<bdf>`` (PF, or  ``dddd_bb_ss_f`` of the
                    last VF's name with one       function in use (else the
                    handle per VF)                first sharing one)
inspur/xilinx FPGA  ``<host>_<bdf>``              ``dddd_bb_ss_f`` (Xilinx:
                                                  user function)
intel_qat_driver    one ``<hostname>_<VF bdf>``   the PF's VF pool child
                    per VF                        (one VF's deployable is
                                                  adopted, the others are
                                                  retained while in use)
intel_nic_driver    one per VF (or the PF)        the PF's VF pool child
inspur NVMe, PCI    ``<host>_<bdf>``              ``dddd_bb_ss_f``
huawei_ascend       none (upstream keeps none)    (nothing to adopt)
==================  ============================  =========================

Attach handles are the same when their info names the same PCI function
(and the same other keys, e.g. an mdev's ``vgpu_mark``), however the
numbers are spelt: upstream's fake driver writes ``"device": "0"`` where
ours write ``"00"`` (:func:`handle_identity`).
"""

from __future__ import annotations

from collections.abc import Iterable
import json
from typing import Any

from cyborg.domain import device_profile
from cyborg.domain import device_tree
from cyborg.domain import providers

# PCI address keys of an attach handle's info, and how each is spelt.
_PCI_FORMATS = {'domain': '%04x', 'bus': '%02x', 'device': '%02x',
                'function': '%x'}


def _info(attach_info: str | dict[str, Any]) -> dict[str, Any]:
    if isinstance(attach_info, dict):
        return attach_info
    try:
        value = json.loads(attach_info)
    except (TypeError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def pci_function(attach_info: str | dict[str, Any]) -> str | None:
    """``dddd:bb:ss.f`` of the PCI function an attach handle's info
    names (an mdev's: its parent's); None when it names none."""
    info = _info(attach_info)
    try:
        parts = {key: int(str(info[key]), 16) for key in _PCI_FORMATS}
    except (KeyError, ValueError):
        return None
    return '%s:%s:%s.%s' % tuple(_PCI_FORMATS[key] % parts[key]
                                 for key in _PCI_FORMATS)


def handle_identity(attach_info: str | dict[str, Any]) -> str:
    """What identifies an attach handle in its device: its info, with
    the PCI address numbers spelt one way."""
    info = dict(_info(attach_info))
    function = pci_function(info)
    if function is not None:
        info.update(device_tree.pci_address_info(function))
    elif not info:
        # Not JSON: the text itself.
        return str(attach_info)
    return device_tree.canonical_json(info)


def is_foreign(rp_uuid: str | None, host: str, address: str,
               name: str) -> bool:
    """Whether a deployable's provider uuid is not the one this service
    derives for it (an imported deployable, adopted or not)."""
    return rp_uuid != providers.provider_uuid(host, address, name)


def match(reported: dict[str, set[str]],
          foreign: list[tuple[int, set[str], set[str]]]) -> dict[str, int]:
    """{reported name: foreign deployable id} of the adoptions.

    ``reported``: the names of the reported deployables that no row
    carries, with the PCI functions of their handles; ``foreign``: (id,
    PCI functions, PCI functions in use) of the device's foreign
    deployables no reported deployable names. Each foreign deployable is
    adopted at most once.
    """
    found: dict[str, int] = {}
    taken: set[int] = set()
    for name, functions in sorted(reported.items()):
        candidates = [(-len(functions & theirs), row_id)
                      for row_id, theirs, in_use in foreign
                      if row_id not in taken and functions & theirs
                      and in_use <= functions]
        if candidates:
            row_id = min(candidates)[1]
            found[name] = row_id
            taken.add(row_id)
    return found


def referenced_traits(groups: Iterable[dict[str, Any]]) -> set[str]:
    """The traits device profile groups require or forbid."""
    prefix = device_profile.TRAIT + ':'
    return {key[len(prefix):] for group in groups
            for option in device_profile.options(group) for key in option
            if key.startswith(prefix)}


def kept_traits(recorded: Iterable[str], ours: Iterable[str],
                referenced: set[str]) -> list[str]:
    """The traits an adopted deployable keeps beside ours: those it had
    (upstream's) that ours lack and a device profile references."""
    return sorted((set(recorded) - set(ours)) & referenced)
