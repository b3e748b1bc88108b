from cyborg.policies import base

PATH = '/v2/devices'

rules = [
    base.rule('cyborg:device:get_all', base.PROJECT_MANAGER_OR_ADMIN,
              'List devices.', [('GET', PATH)]),
    base.rule('cyborg:device:get_one', base.PROJECT_MANAGER_OR_ADMIN,
              'Show a device.', [('GET', PATH + '/{uuid}')]),
    base.rule('cyborg:device:disable', base.ADMIN,
              'Disable a device.', [('POST', PATH + '/{uuid}/disable')]),
    base.rule('cyborg:device:enable', base.ADMIN,
              'Enable a device.', [('POST', PATH + '/{uuid}/enable')]),
]
