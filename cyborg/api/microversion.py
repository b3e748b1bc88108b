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

"""API microversions: the history, parsing the request header, and the
version range.

Each version is a constant below, beside what it adds; controllers test
``pecan.request.version`` against these constants only. A new version
adds its constant here and raises :data:`MAX_VERSION`.
"""

import functools
import re

import microversion_parse

SERVICE_TYPE = 'accelerator'
HEADER = 'OpenStack-API-Version'
ENVIRON_KEY = 'cyborg.api_version'

#: 2.0 - baseline.
MIN_VERSION = (2, 0)
#: 2.1 - an ARQ bind may set ``/project_id`` (admins only).
ARQ_BIND_PROJECT_ID = (2, 1)
#: 2.2 - ``GET /v2/device_profiles/{name}`` accepts a name.
DEVICE_PROFILE_BY_NAME = (2, 2)
#: 2.3 - devices show ``status`` (and the device list filters by it).
DEVICE_STATUS = (2, 3)
#: 2.4 - devices show ``health`` and ``missing``.
DEVICE_HEALTH = (2, 4)
#: 2.5 - ARQs show ``bind_error``: why a bind failed.
ARQ_BIND_ERROR = (2, 5)
#: 2.6 - devices show ``utilization``: the latest metrics their agent
#: reported (``metrics``, ``reported_at``), or null.
DEVICE_UTILIZATION = (2, 6)
#: 2.7 - devices show why they have their health and since when
#: (``health_reason``, ``health_since``) and, to admins, their
#: ``deployables`` with the ARQs holding them (``allocations``).
DEVICE_ALLOCATIONS = (2, 7)
#: 2.8 - device taints: ``/v2/device_taint_rules``, devices show their
#: ``taints``, device profile groups accept tolerations, and ARQs show
#: their ``device_health``.
DEVICE_TAINTS = (2, 8)
#: 2.9 - device profiles: ``PATCH`` (description, groups, ``enabled``),
#: groups of ordered ``alternatives``, the implicit ``class:<RC>``
#: profiles; ``/v2/quotas/{project_id}``.
PROFILE_UPDATES = (2, 9)
#: 2.10 - devices show their ``partitions`` (mode, profile, pinned,
#: in use, still creatable); ``PUT /v2/devices/{uuid}/partitions`` sets
#: or pins a partitioned GPU's profile (admins).
DEVICE_PARTITIONS = (2, 10)
MAX_VERSION = DEVICE_PARTITIONS

# ASCII digits, few enough to convert (a longer number names no version).
_VERSION_RE = re.compile(r'^\s*([0-9]{1,9})\.([0-9]{1,9})\s*$', re.ASCII)


class InvalidHeader(ValueError):
    """The header cannot be parsed."""


class UnsupportedVersion(ValueError):
    """The header names a version outside the supported range."""


def as_string(version: tuple[int, int]) -> str:
    return '%d.%d' % version


@functools.lru_cache(maxsize=64)
def parse_header(value: str | None) -> tuple[int, int]:
    """The version a request asks for.

    Accepts ``accelerator 2.N``, ``accelerator latest``, a comma-separated
    list naming several services, read by ``microversion_parse`` (the last
    ``accelerator`` entry counts), and (deprecated) a bare ``2.N`` or
    ``latest``. A header that names only other services, or none at all,
    selects the minimum version; one without an ``accelerator`` entry
    that is not a list of services and versions is invalid.
    """
    if value is None or not value.strip():
        return MIN_VERSION
    requested = _legacy_version(value)
    if requested is None:
        requested = microversion_parse.get_version(
            {microversion_parse.STANDARD_HEADER: value},
            service_type=SERVICE_TYPE)
    if requested is None:
        if any(len(item.split()) != 2 for item in value.split(',')):
            raise InvalidHeader(value)
        return MIN_VERSION
    if requested.lower() == 'latest':
        return MAX_VERSION
    version = _version(requested, value)
    check_supported(version)
    return version


def _legacy_version(value: str) -> str | None:
    """The version of a header that is one bare word (``2.N``), which
    ``microversion_parse`` does not read; None for any other header."""
    words = value.split()
    if len(words) == 1 and ',' not in value:
        return words[0]
    return None


def _version(requested: str, value: str) -> tuple[int, int]:
    """``requested`` (``X.Y``, ASCII digits) as a version; InvalidHeader
    (naming the whole header ``value``) if it is none."""
    if not _VERSION_RE.match(requested):
        raise InvalidHeader(value)
    parsed = microversion_parse.parse_version_string(requested)
    return (parsed.major, parsed.minor)


def check_supported(version: tuple[int, int]) -> None:
    if version[0] != MAX_VERSION[0]:
        raise UnsupportedVersion(
            'Mutually exclusive versions requested. Version %s requested '
            'but not supported by this service. The supported version '
            'range is: [%s, %s].' % (as_string(version),
                                     as_string(MIN_VERSION),
                                     as_string(MAX_VERSION)))
    if not MIN_VERSION <= version <= MAX_VERSION:
        raise UnsupportedVersion(
            'Version %s was requested but the minor version is not '
            'supported by this service. The supported version range is: '
            '[%s, %s].' % (as_string(version), as_string(MIN_VERSION),
                           as_string(MAX_VERSION)))


def response_headers(version: tuple[int, int]) -> list[tuple[str, str]]:
    return [
        (HEADER, '%s %s' % (SERVICE_TYPE, as_string(version))),
        ('OpenStack-API-Minimum-Version', as_string(MIN_VERSION)),
        ('OpenStack-API-Maximum-Version', as_string(MAX_VERSION)),
        ('Vary', HEADER),
    ]
