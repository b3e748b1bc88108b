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

"""The API reference (``api-ref/source``) against the API's controllers.

Every endpoint the controllers route (:mod:`cyborg.api.controllers.root`
and :mod:`~cyborg.api.controllers.routing`) has a section of its own in
the reference, and every section an endpoint; a section whose request
has a body shows a request sample, one whose answer has a body (200 or
201) a response sample. ``tests/functional/test_api_samples.py`` sends
the samples of each section to its endpoint of the real API.
"""

from __future__ import annotations

from tests.docs.api_ref import routed_endpoints
from tests.docs.api_ref import sections

# Routed handlers that are no endpoint: they only refuse, and the
# reference says so where the endpoint they stand next to is.
NOT_ENDPOINTS = {
    # attributes.delete(uuid=None): 400, the uuid goes in the path.
    ('DELETE', '/v2/attributes'),
    # device_taint_rules.delete(ident=None): 400, the uuid goes in the
    # path.
    ('DELETE', '/v2/device_taint_rules'),
}


SECTIONS = sections()


def test_every_endpoint_has_a_section_and_every_section_an_endpoint():
    documented = [s.endpoint for s in SECTIONS]
    assert len(documented) == len(set(documented)), sorted(documented)
    routed = routed_endpoints() - NOT_ENDPOINTS
    assert set(documented) == routed, (
        'not documented: %s; no such endpoint: %s' % (
            sorted(routed - set(documented)),
            sorted(set(documented) - routed)))


def test_every_section_shows_its_samples():
    missing = []
    for section in SECTIONS:
        assert section.codes, '%s %s: no normal response codes' % (
            section.method, section.path)
        if set(section.codes) & {200, 201} and not section.responses:
            missing.append('%s %s: no response sample' % (
                section.method, section.path))
        if (section.method in ('POST', 'PUT', 'PATCH')
                and not section.no_body and not section.requests):
            missing.append('%s %s: no request sample' % (
                section.method, section.path))
        if set(section.codes) <= {202, 204} and section.responses:
            missing.append('%s %s: a response sample for an answer without '
                           'a body' % (section.method, section.path))
    assert not missing, '\n'.join(missing)
