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

"""The ``accelerator_request.exists`` payload: one usage record.

Its data is the record as :func:`cyborg.domain.usage.records` computes
it and the database keeps it (sent to the byte as created, whenever it
is sent); this module wraps it in the versioned envelope
(:data:`cyborg.notifications.payloads.EXISTS`) and gives its JSON
Schema (draft 2020-12). ``doc/notification_samples/
accelerator_request.exists.json`` is a sample the tests validate.
"""

from typing import Any

from cyborg.domain import usage
from cyborg.notifications import payloads

EVENT_TYPE = usage.EVENT_TYPE
#: Each field of the data and its JSON Schema.
FIELDS = payloads.EXISTS.fields


def envelope(data: dict[str, Any]) -> dict[str, Any]:
    """The versioned payload carrying ``data`` (a stored record)."""
    return payloads.EXISTS.build(data)


def schema() -> dict[str, Any]:
    """The JSON Schema of the enveloped payload: every field present,
    none other."""
    return payloads.EXISTS.schema()
