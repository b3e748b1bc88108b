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

"""Naming rules for Placement resource classes and traits.

The one place that decides what a valid resource class or trait name is,
used by device profile validation and by Placement reporting.
"""

import functools
import re

import os_resource_classes
import os_traits

CUSTOM_PREFIX = 'CUSTOM_'
OWNER_TRAIT = 'OWNER_CYBORG'
_CUSTOM_NAME = re.compile(r'^CUSTOM_[A-Z0-9_]+$')


def normalize(name: str) -> str:
    """Upper-case a name and turn hyphens into underscores."""
    return name.strip().upper().replace('-', '_')


def custom_name(text: str) -> str:
    """``CUSTOM_<TEXT>`` with characters Placement rejects made ``_``."""
    text = re.sub(r'[^A-Z0-9_]', '_', normalize(text))
    if text.startswith(CUSTOM_PREFIX):
        return text
    return CUSTOM_PREFIX + text


@functools.lru_cache(maxsize=1)
def _standard_traits() -> frozenset[str]:
    # os_traits walks its modules on every get_traits() call.
    return frozenset(os_traits.get_traits())


def is_standard_resource_class(name: str) -> bool:
    """Whether ``name`` is one of os-resource-classes' standard classes,
    which every Placement has (no ``CUSTOM_`` prefix, never created)."""
    return name in os_resource_classes.STANDARDS


def is_standard_trait(name: str) -> bool:
    """Whether ``name`` is one of os-traits' standard traits, which every
    Placement has (no ``CUSTOM_`` prefix, never created)."""
    return name in _standard_traits()


def is_valid_resource_class(name: str) -> bool:
    return (is_standard_resource_class(name)
            or _CUSTOM_NAME.match(name) is not None)


def is_valid_trait(name: str) -> bool:
    return is_standard_trait(name) or _CUSTOM_NAME.match(name) is not None
