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

"""The API reference's sections (``api-ref/source/*.inc``) and the
endpoints the API's controllers route, for the tests that check one
against the other and the samples against the real API."""

from __future__ import annotations

import dataclasses
import os
import re

from cyborg.api.controllers import root

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
API_REF = os.path.join(ROOT, 'api-ref', 'source')
PARAMETER = re.compile(r'\{[^}/]+\}')


@dataclasses.dataclass
class Section:
    """One ``rest_method`` section of the reference."""

    method: str
    path: str
    source: str
    codes: list[int]
    requests: list[str]
    responses: list[str]
    no_body: bool

    @property
    def endpoint(self) -> tuple[str, str]:
        return self.method, PARAMETER.sub('{}', self.path)

    def matches(self, method: str, path: str) -> bool:
        """Whether a request ``method path`` (a query string allowed)
        reaches this section's endpoint."""
        pattern = ''.join(
            '[^/]+' if PARAMETER.fullmatch(part) else re.escape(part)
            for part in re.split('(%s)' % PARAMETER.pattern, self.path))
        return (method == self.method
                and re.fullmatch(pattern, path.split('?')[0]) is not None)


def sections() -> list[Section]:
    """Every rest_method section of the reference's .inc files."""
    found = []
    for name in sorted(os.listdir(API_REF)):
        if not name.endswith('.inc'):
            continue
        with open(os.path.join(API_REF, name)) as f:
            text = f.read()
        parts = re.split(r'^\.\. rest_method:: (\S+) (\S+)\n', text,
                         flags=re.MULTILINE)
        for method, path, body in zip(parts[1::3], parts[2::3], parts[3::3],
                                      strict=True):
            codes = re.search(r'Normal response codes: ([\d, ]+)', body)
            samples = re.findall(r'literalinclude:: samples/(\S+)', body)
            found.append(Section(
                method, path, name,
                [int(c) for c in codes.group(1).split(',')] if codes else [],
                [s for s in samples if s.endswith('-req.json')],
                # /metrics answers text.
                [s for s in samples
                 if s.endswith(('-resp.json', '-resp.txt'))],
                'has no body' in body))
    return found


def routed_endpoints() -> set[tuple[str, str]]:
    """(method, path) of everything the root controller routes, path
    parameters as ``{}``."""
    return set(root.endpoints(member='{}'))


def section_of(method: str, path: str) -> Section | None:
    """The section of the endpoint a request reaches (a path without
    parameters wins over one with)."""
    candidates = [s for s in sections() if s.matches(method, path)]
    candidates.sort(key=lambda s: len(PARAMETER.findall(s.path)))
    return candidates[0] if candidates else None
