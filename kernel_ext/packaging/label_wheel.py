#!/usr/bin/env python3
"""Give a built torchleak wheel the torch it was built against as its version's local label.

    python kernel_ext/packaging/label_wheel.py dist/torchleak-0.1.0-cp311-cp311-linux_x86_64.whl

writes dist/torchleak-0.1.0+torch2.13.0.cpu-cp311-cp311-linux_x86_64.whl (the torch recorded in
the wheel's own torchleak/build_info.json) and removes the unlabelled one. A wheel serves one
torch minor release; its name says which, and the package refuses another at import. The
version lives in three places of a wheel: its file name, its .dist-info folder's name and
METADATA's Version line; RECORD lists every file with its hash and is written anew.
"""

import base64
import hashlib
import json
import pathlib
import re
import sys
import zipfile


def torch_label(torch_version):
    """A PEP 440 local label for a torch version: "2.13.0+cpu" -> "torch2.13.0.cpu"."""
    return "torch" + re.sub(r"[^0-9A-Za-z]+", ".", torch_version).strip(".")


def _record_hash(data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def label(wheel_path):
    wheel_path = pathlib.Path(wheel_path)
    name, version, rest = wheel_path.name.split("-", 2)
    if "+" in version:
        raise SystemExit(f"label_wheel: {wheel_path.name} is labelled already")
    with zipfile.ZipFile(wheel_path) as wheel:
        entries = [(info, wheel.read(info)) for info in wheel.infolist()]
    files = {info.filename: data for info, data in entries}
    built = json.loads(files[f"{name}/build_info.json"])["torch"]
    new_version = f"{version}+{torch_label(built)}"
    old_info, new_info = f"{name}-{version}.dist-info", f"{name}-{new_version}.dist-info"
    out = wheel_path.with_name(f"{name}-{new_version}-{rest}")
    record_rows = []
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for info, data in entries:
            filename = info.filename.replace(old_info + "/", new_info + "/", 1)
            if filename == f"{new_info}/RECORD":
                continue
            if filename == f"{new_info}/METADATA":
                data = re.sub(rb"(?m)^Version: .*$", f"Version: {new_version}".encode(), data, count=1)
            info.filename = filename
            wheel.writestr(info, data)
            record_rows.append(f"{filename},{_record_hash(data)},{len(data)}")
        record_rows.append(f"{new_info}/RECORD,,")
        wheel.writestr(f"{new_info}/RECORD", "\n".join(record_rows) + "\n")
    wheel_path.unlink()
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    print(label(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
