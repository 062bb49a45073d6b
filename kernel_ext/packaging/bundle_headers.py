#!/usr/bin/env python3
"""Copy the header-only libraries the core compiles against into third_party/, for the sdist.

    python kernel_ext/packaging/bundle_headers.py [--dest third_party]

A user who installs from the sdist needs no system package: CMakeLists.txt uses these copies
when the system has none of its own (a distribution's copy wins, as packagers expect). They are
taken from the machine that makes the sdist, from the first include directory that has them
(CPATH, a conda prefix, /usr/local/include, /usr/include), with their licence files, and
their versions are written to third_party/BUNDLED.json, which the build prints and the package
records. third_party/ is made anew each time and is never committed.
"""

import argparse
import json
import os
import pathlib
import re
import shutil
import sys

# (name, the header directory, the header whose macros give the version, the macros' prefix,
# licence files to look for: upstream's name in a prefix's share/, else Debian's copyright)
LIBRARIES = [
    (
        "nlohmann_json",
        "nlohmann",
        "nlohmann/detail/abi_macros.hpp",
        "NLOHMANN_JSON_VERSION",
        ["share/licenses/nlohmann_json/LICENSE.MIT", "share/doc/nlohmann-json3-dev/copyright"],
    ),
    (
        "xtensor",
        "xtensor",
        "xtensor/xtensor_config.hpp",
        "XTENSOR_VERSION",
        ["share/licenses/xtensor/LICENSE", "share/doc/libxtensor-dev/copyright"],
    ),
    ("xtl", "xtl", "xtl/xtl_config.hpp", "XTL_VERSION", ["share/licenses/xtl/LICENSE", "share/doc/xtl-dev/copyright"]),
]


def include_dirs():
    dirs = [d for d in os.environ.get("CPATH", "").split(os.pathsep) if d]
    if os.environ.get("CONDA_PREFIX"):
        dirs.append(os.path.join(os.environ["CONDA_PREFIX"], "include"))
    dirs += ["/usr/local/include", "/usr/include"]
    return [pathlib.Path(d) for d in dirs]


def version_of(header, prefix):
    text = header.read_text(errors="replace")
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        match = re.search(rf"#\s*define\s+{prefix}_{part}\s+(\d+)", text)
        if not match:
            raise SystemExit(f"bundle_headers: {header} does not define {prefix}_{part}")
        parts.append(match.group(1))
    return ".".join(parts)


def licence_of(include_dir, candidates):
    prefix = include_dir.parent
    for candidate in candidates:
        path = prefix / candidate
        if path.is_file():
            return path
    return None


def bundle(dest):
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    record = {}
    for name, directory, version_header, macro, licences in LIBRARIES:
        found = next((d for d in include_dirs() if (d / version_header).is_file()), None)
        if found is None:
            raise SystemExit(
                f"bundle_headers: {version_header} is in none of "
                f"{', '.join(str(d) for d in include_dirs())}: the sdist is made from a machine "
                f"that has {name} (make sdist installs Debian's copy)"
            )
        licence = licence_of(found, licences)
        if licence is None:
            raise SystemExit(f"bundle_headers: no licence file for {name} beside {found}: looked for {licences}")
        target = dest / name
        shutil.copytree(found / directory, target / "include" / directory)
        shutil.copyfile(licence, target / "LICENSE")
        record[name] = {
            "version": version_of(found / version_header, macro),
            "copied_from": str(found / directory),
            "licence": f"third_party/{name}/LICENSE",
        }
    (dest / "BUNDLED.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=pathlib.Path, default=pathlib.Path("third_party"))
    args = parser.parse_args(argv)
    for name, entry in bundle(args.dest).items():
        print(f"bundled {name} {entry['version']} from {entry['copied_from']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
