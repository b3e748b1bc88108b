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

"""How a deployable becomes a Placement resource provider.

A deployable's provider has a UUID and a name derived from where the
deployable is (so a report names the same provider every time), and its
resource class and traits are kept as the deployable's rc and
trait<N> attributes: the attributes that shape Placement. Other
attribute keys are the operator's, set through the API.
"""

import uuid as uuid_lib

from cyborg.domain import resource_names

# Namespace of the resource provider UUIDs of deployables.
RP_NAMESPACE = uuid_lib.UUID('7c9b7e1e-1f43-4d8e-9a43-6c2f1d8e5b2a')

#: Attribute key holding the deployable's resource class.
RESOURCE_CLASS_KEY = 'rc'
#: Attribute keys trait0, trait1... hold the deployable's traits.
TRAIT_KEY_PREFIX = 'trait'


def provider_uuid(host: str, address: str, deployable: str) -> str:
    """A deployable's resource provider UUID, stable across reports."""
    return str(uuid_lib.uuid5(RP_NAMESPACE,
                              '%s/%s/%s' % (host, address, deployable)))


def provider_name(host: str, deployable: str) -> str:
    return '%s_%s' % (host, deployable)


def placement_attributes(resource_class: str,
                         traits: list[str]) -> dict[str, str]:
    """The attributes that record a deployable's class and traits."""
    return {RESOURCE_CLASS_KEY: resource_class,
            **trait_attributes(sorted(traits))}


def trait_attributes(traits: list[str]) -> dict[str, str]:
    """The attributes recording ``traits``, in that order: ``trait0``,
    ``trait1``..."""
    return {'%s%d' % (TRAIT_KEY_PREFIX, index): trait
            for index, trait in enumerate(traits)}


def is_trait_key(key: str) -> bool:
    """Whether ``key`` is one :func:`trait_attributes` writes
    (``trait<N>``)."""
    suffix = key[len(TRAIT_KEY_PREFIX):]
    return key.startswith(TRAIT_KEY_PREFIX) and suffix.isdigit()


def shapes_placement(key: str) -> bool:
    """Whether an attribute key is one that shapes the provider (and so
    is the report's to set, not the operator's)."""
    return key == RESOURCE_CLASS_KEY or key.startswith(TRAIT_KEY_PREFIX)


def traits_of(attributes: dict[str, str]) -> set[str]:
    """The traits recorded in a deployable's attributes."""
    return {value for key, value in attributes.items()
            if key.startswith(TRAIT_KEY_PREFIX)}



def provider_traits(traits) -> set[str]:
    """The traits a deployable's provider has in Placement: its own
    ``traits`` (:func:`traits_of`) and ``OWNER_CYBORG``."""
    return set(traits) | {resource_names.OWNER_TRAIT}
