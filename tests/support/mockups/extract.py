"""Rebuilds the mockups from git snapshots of their sources (see SOURCE.md):
`python3 extract.py ISERVER_REPO DMTF_MOCKUP_SERVER_REPO` (each checked out at the commit named there)."""
import json, os, re, subprocess, sys
OUT = os.path.dirname(os.path.abspath(__file__))
def show(repo, path):
    return subprocess.check_output(['git', '-C', repo, 'show', 'HEAD:' + path], text=True)
def write(mockup, uri, doc):
    rel = uri.rstrip('/')[len('/redfish/v1'):].lstrip('/')
    d = os.path.join(OUT, mockup, rel)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'index.json'), 'w') as f:
        json.dump(doc, f, indent=4, ensure_ascii=False)
        f.write('\n')
# Dell R650, recorded by iserver: "## URI" then ```{json}```
dell = sys.argv[1] if len(sys.argv) > 2 else "/work/.mirror/akaliwod+iserver/repo"
wanted = {
 '/redfish/v1/Systems', '/redfish/v1/Systems/System.Embedded.1',
 '/redfish/v1/Systems/System.Embedded.1/Bios', '/redfish/v1/Systems/System.Embedded.1/Bios/Settings',
 '/redfish/v1/Systems/System.Embedded.1/EthernetInterfaces',
 '/redfish/v1/Managers', '/redfish/v1/Managers/iDRAC.Embedded.1', '/redfish/v1/UpdateService',
}
for page in ['UriSystems.md', 'UriManagers.md', 'UriUpdateService.md']:
    text = show(dell, 'doc/redfish-tests-dell-vserver/' + page)
    for m in re.finditer(r'^## (\S+)\n\n```(.*?)```', text, re.S | re.M):
        uri, body = m.group(1), m.group(2).strip()
        keep = uri in wanted or re.match(r'^/redfish/v1/Systems/System.Embedded.1/EthernetInterfaces/[^/]+$', uri)
        if keep and body:
            write('dell-r650', uri, json.loads(body))
root = show(dell, 'doc/redfish-tests-dell-vserver/Resource.md')
m = re.search(r'^/redfish/v1/\n-+\n(\{.*?\n\})', root, re.S | re.M)
write('dell-r650', '/redfish/v1', json.loads(m.group(1)))
# DMTF public-rackmount1: files as they are
dmtf = sys.argv[2] if len(sys.argv) > 2 else "/work/.mirror/DMTF+Redfish-Mockup-Server/repo"
paths = ['', 'Systems', 'Systems/437XR1138R2', 'Systems/437XR1138R2/Bios', 'Systems/437XR1138R2/Bios/Settings',
         'Systems/437XR1138R2/EthernetInterfaces', 'Systems/437XR1138R2/EthernetInterfaces/12446A3B0411',
         'Systems/437XR1138R2/EthernetInterfaces/12446A3B8890', 'Systems/437XR1138R2/EthernetInterfaces/ToManager',
         'Systems/437XR1138R2/EthernetInterfaces/VLAN1', 'Systems/437XR1138R2/SecureBoot',
         # inspection: processors (two CPUs and an FPGA), DIMMs, SimpleStorage (no Storage, no PCIe here)
         'Systems/437XR1138R2/Processors', 'Systems/437XR1138R2/Processors/CPU1',
         'Systems/437XR1138R2/Processors/CPU2', 'Systems/437XR1138R2/Processors/FPGA1',
         'Systems/437XR1138R2/Memory', 'Systems/437XR1138R2/Memory/DIMM1', 'Systems/437XR1138R2/Memory/DIMM2',
         'Systems/437XR1138R2/Memory/DIMM3', 'Systems/437XR1138R2/Memory/DIMM4',
         'Systems/437XR1138R2/SimpleStorage', 'Systems/437XR1138R2/SimpleStorage/1',
         'Managers', 'Managers/BMC', 'UpdateService', 'UpdateService/FirmwareInventory',
         'SessionService', 'SessionService/Sessions',
         # virtual media: a CD (the boot ISO goes there) and a removable-media drive
         'Systems/437XR1138R2/VirtualMedia', 'Systems/437XR1138R2/VirtualMedia/CD1',
         'Systems/437XR1138R2/VirtualMedia/Floppy1',
         # the faulty-host report: event logs of the system (SEL) and of the BMC, each
         # service with its entries collection (members inline) and one entry by itself
         'Systems/437XR1138R2/LogServices', 'Systems/437XR1138R2/LogServices/Log1',
         'Systems/437XR1138R2/LogServices/Log1/Entries', 'Systems/437XR1138R2/LogServices/Log1/Entries/1',
         'Systems/437XR1138R2/LogServices/Log1/Entries/2',
         'Managers/BMC/LogServices', 'Managers/BMC/LogServices/Log', 'Managers/BMC/LogServices/Log/Entries',
         'Managers/BMC/LogServices/Log/Entries/1']
inv = json.loads(show(dmtf, 'public-rackmount1/UpdateService/FirmwareInventory/index.json'))
paths += [m['@odata.id'][len('/redfish/v1/'):] for m in inv['Members']]
for p in paths:
    doc = json.loads(show(dmtf, 'public-rackmount1/' + (p + '/' if p else '') + 'index.json'))
    write('dmtf-rackmount1', '/redfish/v1/' + p, doc)
# The recording has nothing queued (`Attributes: {}`): queue two values, as
# someone in the iDRAC UI would have, so that pending detection has a Dell shape.
p = os.path.join(OUT, 'dell-r650/Systems/System.Embedded.1/Bios/Settings/index.json')
doc = json.load(open(p))
doc['Attributes'] = {'LogicalProc': 'Disabled', 'SriovGlobalEnable': 'Enabled'}
with open(p, 'w') as f:
    json.dump(doc, f, indent=4, ensure_ascii=False)
    f.write('\n')
