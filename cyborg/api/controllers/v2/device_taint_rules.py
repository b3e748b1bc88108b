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

"""/v2/device_taint_rules (API 2.8): list, show, create and delete the
taint rules that put admin taints on the devices they select.

Reads are the API's; creation and deletion go through the conductor,
which applies the rule (:mod:`cyborg.db.taint_rules`). A rule's
``status`` (shown by GET of one rule and by its creation) lists the
devices it taints, or for a dry run (effect ``None``) would taint, the
ARQs bound on them, their instances and their projects.
"""

from typing import Any

import pecan

from cyborg.api import microversion
from cyborg.api import validation
from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.api.schemas import device_taint_rule as schema
from cyborg.common import exception
from cyborg.db import taint_rules as taint_rules_db
from cyborg.domain import taint_rules
from cyborg.policies import device_taint_rule as policy

COLLECTION = 'device_taint_rules'


def view(rule: dict[str, Any], status: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    document = {
        'uuid': rule['uuid'],
        'name': rule['name'],
        'description': rule['description'],
        'selector': rule['selector'],
        'taint': {'key': rule['key'], 'value': rule['value'],
                  'effect': rule['effect'], 'reason': rule['reason']},
        'created_at': base.timestamp(rule['created_at']),
        'links': [base.link(COLLECTION, rule['uuid'])],
    }
    if status is not None:
        document['status'] = status
    return document


def _check_version() -> None:
    if not base.version_at_least(microversion.DEVICE_TAINTS):
        raise exception.MicroversionTooLow(
            version=microversion.as_string(microversion.DEVICE_TAINTS))


def _uuid(ident: str) -> str:
    """The rule's canonical uuid; 404 for what cannot name one."""
    try:
        return validation.canonical_uuid(ident)
    except ValueError:
        raise exception.TaintRuleNotFound(uuid=ident)


def _creation_values(body: dict[str, Any]) -> dict[str, Any]:
    """The conductor's values of a valid creation body; 400 saying what
    is wrong otherwise."""
    taint = body['taint']
    try:
        taint_rules.check_selector(body['selector'])
        taint_rules.rule_taint(taint['key'], taint['effect'],
                               taint.get('value'), taint.get('reason'))
    except ValueError as e:
        raise exception.Invalid(reason=str(e))
    return {'name': body.get('name'), 'description': body.get('description'),
            'selector': body['selector'], 'key': taint['key'],
            'value': taint.get('value') or '', 'effect': taint['effect'],
            'reason': taint.get('reason')}


class DeviceTaintRulesController(routing.Resource):

    @pecan.expose('json')
    @base.endpoint(policy.GET_ALL)
    def get_all(self, *, context, query):
        _check_version()
        return base.render({COLLECTION: [
            view(rule) for rule in taint_rules_db.rule_list(context)]})

    @pecan.expose('json')
    @base.endpoint(policy.GET_ONE)
    def get_one(self, ident, *, context, query):
        _check_version()
        rule = taint_rules_db.rule_get(context, _uuid(ident))
        return base.render({'device_taint_rule': view(
            rule, taint_rules_db.rule_status(context, rule))})

    @pecan.expose('json')
    @base.endpoint(policy.CREATE, body=schema.CREATE)
    def post(self, *, context, query, body):
        _check_version()
        created = pecan.request.conductor_api.taint_rule_create(
            context, _creation_values(body))
        rule = taint_rules_db.rule_get(context, created['uuid'])
        return base.render(view(rule, taint_rules_db.rule_status(
            context, rule)), status=201)

    @pecan.expose('json')
    @base.endpoint(policy.DELETE)
    def delete(self, ident=None, *, context, query):
        _check_version()
        if ident is None:
            raise exception.Invalid(reason='DELETE needs the rule: '
                                           '/v2/device_taint_rules/{uuid}')
        pecan.request.conductor_api.taint_rule_delete(context, _uuid(ident))
        return base.no_content()
