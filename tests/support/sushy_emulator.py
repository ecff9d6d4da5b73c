"""sushy-tools' Redfish emulator (`sushy-emulator`) with BIOS storage for its fake driver.

The fake driver (the one that needs no libvirt) keeps power state, boot device and NICs
but raises NotSupported for the BIOS and firmware versions. This adds exactly those
five driver methods (BIOS get/set/reset, versions get/set), storing the values in the fake system's own record (`bios`,
`versions` in SUSHY_EMULATOR_FAKE_SYSTEMS), the way sushy's libvirt driver stores them
in domain metadata. Everything a client sees over HTTP -- routes, JSON documents, the
Bios and Bios/Settings resources, PATCH handling, errors, auth -- is sushy-tools' own.

Usage: python sushy_emulator.py --fake --config CONFIG.py -i 127.0.0.1 -p PORT
"""

import sys

from sushy_tools.emulator import main as emulator
from sushy_tools.emulator.resources.systems import fakedriver
from sushy_tools import error


def _record(driver, identity):
    # `_get` resolves names and UUIDs the way the fake driver's own methods do.
    return driver._get(identity)


def get_bios(self, identity):
    bios = _record(self, identity).get('bios')
    if bios is None:
        raise error.NotSupportedError('Not implemented')
    return dict(bios)


def set_bios(self, identity, attributes):
    system = _record(self, identity)
    if system.get('bios') is None:
        raise error.NotSupportedError('Not implemented')
    bios = dict(system['bios'])
    bios.update(attributes)
    self._update(system, bios=bios)


def reset_bios(self, identity):
    system = _record(self, identity)
    self._update(system, bios=dict(system.get('bios_defaults') or {}))


def get_versions(self, identity):
    versions = _record(self, identity).get('versions')
    if versions is None:
        raise error.NotSupportedError('Not implemented')
    return dict(versions)


def set_versions(self, identity, firmware_versions):
    # What sushy's UpdateService.SimpleUpdate calls after its emulated flash.
    system = _record(self, identity)
    versions = dict(system.get('versions') or {})
    versions.update(firmware_versions)
    self._update(system, versions=versions)


fakedriver.FakeDriver.get_bios = get_bios
fakedriver.FakeDriver.set_bios = set_bios
fakedriver.FakeDriver.reset_bios = reset_bios
fakedriver.FakeDriver.get_versions = get_versions
fakedriver.FakeDriver.set_versions = set_versions

if __name__ == '__main__':
    sys.exit(emulator.main())
