"""The v2 API."""

import pecan
from pecan import rest

from cyborg.api.controllers import base
from cyborg.api.controllers.v2 import device_profiles
from cyborg.api import microversion


class V2Controller(rest.RestController):

    device_profiles = device_profiles.DeviceProfilesController()

    @pecan.expose(content_type=base.JSON)
    def get(self):
        return base.render({
            'id': 'v2.0',
            'links': [{'href': pecan.request.base_url + '/v2/',
                       'rel': 'self'}],
            'max_version': microversion.as_string(microversion.MAX_VERSION),
            'min_version': microversion.as_string(microversion.MIN_VERSION),
            'status': 'CURRENT',
        })
