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

"""The ``filters`` query syntax of the devices and deployables lists.

Upstream clients send WSME-style arrays: ``filters.field=limit&
filters.value=2`` or indexed, ``filters[0].field=...&filters[0].value=...``.
"""

import re

from cyborg.api import validation
from cyborg.common import exception

FILTER_FIELDS = frozenset([
    'parent_uuid', 'root_uuid', 'board', 'availability', 'interface_type',
    'instance_uuid', 'limit', 'marker', 'sort_key', 'sort_dir', 'name'])
_KEY = re.compile(r'^filters(?:\[([0-9]{1,4})\])?\.(field|value)$')


def split(params: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(plain query parameters, filters as field -> value)."""
    plain, entries = {}, {}
    for key, value in params.items():
        match = _KEY.match(key)
        if match is None:
            if key.startswith('filters'):
                raise exception.Invalid(
                    reason='Invalid filters argument %r: use '
                           'filters.field=<name>&filters.value=<value>' % key)
            plain[key] = value
            continue
        index = int(match.group(1) or 0)
        entries.setdefault(index, {})[match.group(2)] = value
    filters = {}
    for entry in entries.values():
        field = entry.get('field')
        if field not in FILTER_FIELDS:
            raise exception.Invalid(
                reason='Invalid input for field/attribute field. Value: %r. '
                       'Value should be one of: %s' %
                       (field, ', '.join(sorted(FILTER_FIELDS))))
        filters[field] = entry.get('value')
    return plain, filters


def paging(filters: dict[str, str], columns) -> dict:
    """limit, sort_key and sort_dir from the filters, validated."""
    result = {}
    if filters.get('limit') is not None:
        result['limit'] = validation.parse_integer(filters['limit'], 'limit')
    sort_key = filters.get('sort_key')
    if sort_key is not None:
        if sort_key not in columns:
            raise exception.Invalid(reason='Invalid sort_key %r' % sort_key)
        result['sort_key'] = sort_key
    sort_dir = filters.get('sort_dir')
    if sort_dir is not None:
        if sort_dir not in ('asc', 'desc'):
            raise exception.Invalid(reason='Invalid sort_dir %r: use asc or '
                                           'desc' % sort_dir)
        result['sort_dir'] = sort_dir
    return result
