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

"""What the FPGA drivers share: ids, traits, the programming error."""

from __future__ import annotations

import re

from cyborg.accelerator.drivers import errors as driver_errors
from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import pci
from cyborg.domain import device_tree

_ID = re.compile(r'^[0-9a-f]{32}$')


def normalize_id(text: str | None) -> str | None:
    """A region, interface or function id as 32 lowercase hex digits.

    sysfs prints ids without dashes, the OPAE tools and GBS metadata
    with; ``None`` for text that is not such an id.
    """
    if text is None:
        return None
    value = text.strip().lower().replace('-', '')
    if value.startswith('0x'):
        value = value[2:]
    return value if _ID.match(value) else None


def is_blank(function_id: str | None) -> bool:
    """An id of zeros: no function programmed."""
    return function_id is not None and not function_id.strip('0')


def vendor_traits(vendor: str, product: str | None) -> list[str]:
    """``CUSTOM_FPGA_<VENDOR>`` and ``CUSTOM_FPGA_<VENDOR>_<PRODUCT>``."""
    traits = ['CUSTOM_FPGA_%s' % vendor]
    if product:
        traits.append('CUSTOM_FPGA_%s_%s' % (vendor, product))
    return traits


def region_trait(vendor: str, region_id: str) -> str:
    return 'CUSTOM_FPGA_REGION_%s_%s' % (vendor, region_id.upper())


def function_trait(vendor: str, function_id: str) -> str:
    return 'CUSTOM_FPGA_FUNCTION_ID_%s_%s' % (vendor, function_id.upper())


def controlpath_address(controlpath: device_tree.ControlPathID,
                        driver: str) -> pci.PCIAddress:
    """The PCI address a control path id names; a typed error else."""
    info = controlpath.cpid_info or {}
    text = '%s:%s:%s.%s' % (info.get('domain'), info.get('bus'),
                            info.get('device'), info.get('function'))
    if controlpath.cpid_type != 'PCI':
        raise driver_errors.ProgramFailed(
            device=text, reason='%s programs through '
            'PCI control paths, not %s'
            % (driver, controlpath.cpid_type))
    try:
        return pci.parse_address(text)
    except errors.InvalidPCIAddress:
        raise driver_errors.ProgramFailed(device=text,
                                          reason='not a PCI address')


def read_head(path: str, size: int) -> bytes:
    """The first ``size`` bytes of an image; a typed error if unreadable."""
    try:
        with open(path, 'rb') as f:
            return f.read(size)
    except OSError as exc:
        raise driver_errors.ProgramFailed(
            device=path, reason='cannot read the image: '
            '%s' % (exc.strerror or exc))


def tool_message(exc: errors.ToolError, stdout: str = '') -> str:
    """What a failed tool said, for the error raised to the caller."""
    if isinstance(exc, errors.ToolNotAvailable):
        return '%s is not installed' % exc.argv[0]
    if isinstance(exc, errors.ToolTimeout):
        return '%s did not finish within %ss' % (exc.argv[0], exc.timeout)
    if isinstance(exc, errors.ToolFailed):
        said = (exc.stderr.strip() or stdout.strip()
                or 'no message').splitlines()
        return '%s exited with status %d: %s' % (
            exc.argv[0].rsplit('/', 1)[-1], exc.returncode, said[-1])
    return str(exc)

