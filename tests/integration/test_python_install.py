#!/usr/bin/env python3
"""The Python package's install path, without a full `pip install`.

- pyproject.toml's meson arguments (what meson-python passes to `meson
  setup`) configure the package alone: `meson setup` in a temporary folder
  (no compile) and `meson introspect` show no executable and nothing of the
  tests, fuzzers, mount, command or benchmark built by default, and an install
  plan that puts every file under the wheel's `shardfs/` (meson-python maps
  nothing else without a "could not be mapped" warning, and would copy the
  command into the wheel). The regular build still installs the command, its
  man pages and the mount helper.
- A package built for another CPython (its `_shardfs.*.so` renamed to another
  version's tag), or not built at all, fails `import shardfs` with an
  ImportError naming the version it was built for, the running one and the
  rebuild command, not Python's "most likely due to a circular import"; a
  `_shardfs` of the running version's name that does not load keeps its own
  message.

Runs under the interpreter the package was built for (meson sets PYTHONPATH
to <build>/src/python).
"""

import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import unittest

import shardfs  # noqa: E402  (PYTHONPATH=<build>/src/python)

SOURCE_ROOT = os.environ["SHARDFS_SOURCE_ROOT"]
BUILD_ROOT = os.environ["SHARDFS_BUILD_ROOT"]
PACKAGE = os.path.dirname(os.path.abspath(shardfs.__file__))
# What the package's build configures: the read library and its floors
# (README.md, "Layout") and the package's read extension; the package's write
# extension (shardfs._build) in tools/python_build, over the builder and pack,
# which are built only as its dependencies.
PACKAGE_DIRS = ["base", "index", "src/remote", "src/codec", "src/archive", "src/reader",
                "src/indexref", "src/python/shardfs", "tools/python_build"]
WRITE_DIRS = ["tools/builder", "tools/pack"]


def meson(*args, cwd=None):
    exe = shutil.which("meson")
    if exe is None:
        raise AssertionError("meson is not on PATH (scripts/install-deps.sh installs it)")
    p = subprocess.run([exe, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError("meson %s exited %d:\n%s" % (" ".join(args), p.returncode,
                                                          p.stdout[-4000:]))
    return p.stdout


def source_dir_of(target):
    """The folder of the meson.build that defines a target, relative to the source root."""
    return os.path.relpath(os.path.dirname(target["defined_in"]), SOURCE_ROOT)


class PackageBuildTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(SOURCE_ROOT, "pyproject.toml"), "rb") as f:
            args = tomllib.load(f)["tool"]["meson-python"]["args"]
        cls.install_args = args["install"]
        cls.tmp = tempfile.mkdtemp(prefix="shardfs-test-python-install-")
        cls.addClassCleanup(shutil.rmtree, cls.tmp, ignore_errors=True)
        cls.build = os.path.join(cls.tmp, "build")
        meson("setup", cls.build, SOURCE_ROOT, *args["setup"])
        cls.targets = json.loads(meson("introspect", "--targets", cls.build))
        with open(os.path.join(cls.build, "meson-info", "intro-install_plan.json")) as f:
            cls.plan = json.load(f)

    def test_only_the_package_is_built(self):
        by_default = [t for t in self.targets if t["build_by_default"]]
        names = sorted(t["name"] for t in by_default)
        self.assertTrue(any(t["type"] == "shared module" and t["name"].startswith("_shardfs.")
                            for t in by_default), names)
        self.assertEqual([], [t["name"] for t in self.targets if t["type"] == "executable"])
        outside = sorted("%s (%s)" % (t["name"], source_dir_of(t)) for t in by_default
                         if source_dir_of(t) not in PACKAGE_DIRS)
        self.assertEqual([], outside, "built by default outside the package and its libraries")
        # The write side only as an extension module's dependency, never on its own.
        for t in self.targets:
            self.assertIn(source_dir_of(t), PACKAGE_DIRS + WRITE_DIRS,
                          "%s is configured in the package's build" % t["name"])

    def test_install_plan_is_the_wheel(self):
        entries = [(src, d) for group in self.plan.values() for src, d in group.items()]
        self.assertTrue(entries)
        for src, d in entries:
            # Everything inside the package, but the .pth file that lets an
            # unmodified script opt in to shardfs.fastopen (SHARDFS_FASTOPEN=1):
            # Python reads .pth files only at the top of site-packages.
            if d["destination"] == "{py_platlib}/shardfs-fastopen.pth":
                continue
            self.assertTrue(d["destination"].startswith("{py_platlib}/shardfs/"), (src, d))
            self.assertEqual("python-runtime", d["tag"], (src, d))
            self.assertIn("--tags=" + d["tag"], self.install_args)
        names = sorted(os.path.basename(d["destination"]) for _, d in entries)
        for n in ["__init__.py", "_errors.py", "_shardfs.pyi", "py.typed", "fastopen.py",
                  "shardfs-fastopen.pth"]:
            self.assertIn(n, names)
        self.assertTrue(any(n.startswith("_shardfs.") and n.endswith(".so") for n in names), names)

    def test_regular_build_installs_the_command(self):
        with open(os.path.join(BUILD_ROOT, "meson-info", "intro-install_plan.json")) as f:
            plan = json.load(f)
        dests = [d["destination"] for group in plan.values() for d in group.values()]
        for want in ["{bindir}/shardfs", "{sbindir}/mount.fuse.shardfs", "{mandir}/man1/shardfs.1"]:
            self.assertIn(want, dests)

    def test_the_read_extension_links_no_libarchive(self):
        # The read path never links libarchive (nor the write side, which
        # needs it): index bundles unpack with the project's own tar reading.
        ext = shardfs._shardfs.__file__
        needed = subprocess.run(["readelf", "-d", ext], check=True, capture_output=True,
                                text=True).stdout
        self.assertIn("NEEDED", needed)
        self.assertNotIn("libarchive", needed)
        undefined = subprocess.run(["nm", "-D", "--undefined-only", ext], check=True,
                                   capture_output=True, text=True).stdout.split()
        self.assertIn("inflate", undefined)  # The listing is real: zlib's inflate is used.
        self.assertEqual([s for s in undefined if s.startswith("archive_")], [])


def other_cpython_tag():
    """The tag of a CPython that is not this one: 3.9 here, or 3.12 on 3.9."""
    minor = 12 if sys.version_info[:2] == (3, 9) else 9
    return "cpython-3%d" % minor, "CPython 3.%d" % minor


class WrongBuildImportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="shardfs-test-python-import-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.pkg = os.path.join(self.tmp, "shardfs")
        os.mkdir(self.pkg)
        for n in os.listdir(PACKAGE):  # the package's files, not the build's object folder
            if os.path.isfile(os.path.join(PACKAGE, n)):
                shutil.copy2(os.path.join(PACKAGE, n), self.pkg)
        self.ext = [n for n in os.listdir(self.pkg) if n.startswith("_shardfs.")
                    and n[len("_shardfs"):] in importlib.machinery.EXTENSION_SUFFIXES]
        self.assertEqual(1, len(self.ext), os.listdir(PACKAGE))
        self.ext = self.ext[0]

    def import_shardfs(self):
        env = dict(os.environ, PYTHONPATH=self.tmp)
        return subprocess.run([sys.executable, "-c", "import shardfs; print(shardfs.__version__)"],
                              cwd=self.tmp, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=60)

    def assert_message(self, p, *parts):
        self.assertNotEqual(0, p.returncode, p.stdout)
        last = p.stderr.strip().splitlines()[-1]
        self.assertTrue(last.startswith("ImportError: shardfs in " + self.pkg), p.stderr)
        running = "CPython %d.%d (%s)" % (*sys.version_info[:2], sys.executable)
        for part in parts + (running, sys.executable + " -m pip install --no-build-isolation ."):
            self.assertIn(part, last)
        self.assertNotIn("circular import", p.stderr)

    def test_copy_imports(self):
        p = self.import_shardfs()
        self.assertEqual(0, p.returncode, p.stderr)
        self.assertEqual(shardfs.__version__, p.stdout.strip())

    def test_built_for_another_cpython(self):
        tag, version = other_cpython_tag()
        other = "_shardfs.%s-x86_64-linux-gnu.so" % tag
        os.rename(os.path.join(self.pkg, self.ext), os.path.join(self.pkg, other))
        self.assert_message(self.import_shardfs(), "was built for %s (%s)" % (version, other))

    def test_not_built(self):
        os.remove(os.path.join(self.pkg, self.ext))
        self.assert_message(self.import_shardfs(), "has no _shardfs.*.so: it was not built")

    def test_broken_build_keeps_its_message(self):
        with open(os.path.join(self.pkg, self.ext), "wb") as f:
            f.write(b"not an ELF file")
        p = self.import_shardfs()
        self.assertNotEqual(0, p.returncode)
        self.assertIn(self.ext, p.stderr.strip().splitlines()[-1])
        self.assertNotIn("was built for", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
