"""A PEP 517 build backend for this package, standard library only.

It builds a pure-Python wheel of the ``fleetmux`` package (and an sdist), so that
``pip install ./clients/python`` needs no build dependency from PyPI.
"""

import base64
import hashlib
import io
import os
import tarfile
import zipfile

NAME = "fleetmux"
VERSION = "0.1.0"
HERE = os.path.dirname(os.path.abspath(__file__))
DIST_INFO = "%s-%s.dist-info" % (NAME, VERSION)

METADATA = """Metadata-Version: 2.1
Name: fleetmux
Version: %s
Summary: Client for the fleetmux controller's HTTP API (standard library only)
Requires-Python: >=3.9
License: MIT
""" % VERSION

WHEEL = """Wheel-Version: 1.0
Generator: fleetmux build_backend
Root-Is-Purelib: true
Tag: py3-none-any
"""


def _package_files():
    pkg = os.path.join(HERE, NAME)
    for name in sorted(os.listdir(pkg)):
        if name.endswith(".py") or name == "py.typed":
            yield NAME + "/" + name, os.path.join(pkg, name)


def _record_line(arc, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arc, digest, len(data))


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    d = os.path.join(metadata_directory, DIST_INFO)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write(METADATA)
    with open(os.path.join(d, "WHEEL"), "w") as f:
        f.write(WHEEL)
    return DIST_INFO


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    filename = "%s-%s-py3-none-any.whl" % (NAME, VERSION)
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        entries = [(arc, open(path, "rb").read()) for arc, path in _package_files()]
        entries.append((DIST_INFO + "/METADATA", METADATA.encode()))
        entries.append((DIST_INFO + "/WHEEL", WHEEL.encode()))
        for arc, data in entries:
            zf.writestr(arc, data)
            records.append(_record_line(arc, data))
        records.append(DIST_INFO + "/RECORD,,")
        zf.writestr(DIST_INFO + "/RECORD", "\n".join(records) + "\n")
    return filename


# Editable installs (pip install -e) get the same wheel.
build_editable = build_wheel
get_requires_for_build_editable = get_requires_for_build_wheel
prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_sdist(sdist_directory, config_settings=None):
    base = "%s-%s" % (NAME, VERSION)
    filename = base + ".tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tf:
        files = [("pyproject.toml", os.path.join(HERE, "pyproject.toml")),
                 ("build_backend.py", os.path.join(HERE, "build_backend.py"))]
        files += list(_package_files())
        for arc, path in files:
            tf.add(path, arcname=base + "/" + arc)
        info = tarfile.TarInfo(base + "/PKG-INFO")
        data = METADATA.encode()
        info.size = len(data)
        tf.addfile(info, io.BytesIO(data))
    return filename
