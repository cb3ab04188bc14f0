#!/usr/bin/env python3
"""Links the write side's extension module and its stub into the build
tree's package folder (<build>/src/python/shardfs), where only src/python's
meson.build can put targets, so that PYTHONPATH=<build>/src/python imports
shardfs._build as the installed package does. Each link is relative and
replaced atomically; the stamp says it is done.

Usage: link_into_package.py PACKAGE_DIR STAMP FILE...
"""

import os
import sys


def link(target, package_dir):
    name = os.path.join(package_dir, os.path.basename(target))
    tmp = name + ".link-tmp"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(os.path.relpath(os.path.abspath(target), package_dir), tmp)
    os.replace(tmp, name)


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__.strip().splitlines()[-1])
    package_dir = os.path.normpath(os.path.abspath(sys.argv[1]))
    if not os.path.isfile(os.path.join(package_dir, "__init__.py")):
        sys.exit(f"link_into_package.py: {package_dir}: not the package folder (no __init__.py)")
    for target in sys.argv[3:]:
        link(target, package_dir)
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(os.path.basename(t) for t in sys.argv[3:]) + "\n")


if __name__ == "__main__":
    main()
