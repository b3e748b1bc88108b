"""Version discovery documents."""

import pecan
from pecan import rest

from cyborg.api.controllers import base
from cyborg.api.controllers import v2
from cyborg.api import microversion

DESCRIPTION = ('Cyborg is the OpenStack project for lifecycle management '
               'of hardware accelerators, such as GPUs, FPGAs, AI chips, '
               'security accelerators (e.g., crypto), NICs and SSDs.')


def version_summary() -> dict:
    return {
        'id': 'v2',
        'status': 'CURRENT',
        'max_version': microversion.as_string(microversion.MAX_VERSION),
        'min_version': microversion.as_string(microversion.MIN_VERSION),
        'links': [{'href': pecan.request.base_url + '/v2', 'rel': 'self'}],
    }


class RootController(rest.RestController):

    v2 = v2.V2Controller()

    @pecan.expose(content_type=base.JSON)
    def get(self):
        summary = version_summary()
        return base.render({'name': 'OpenStack Cyborg API',
                            'description': DESCRIPTION,
                            'versions': [summary],
                            'default_version': summary})
