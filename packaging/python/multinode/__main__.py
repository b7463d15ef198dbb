"""`python -m multinode ARGS`: the multinode binary with ARGS, as `python -m pip`
runs pip. This process becomes the binary (exec, not a child), so its exit
code, its signals and its process id are the binary's own.
"""

import os
import sys
import sysconfig


def _site():
    """The directory that holds this package (site-packages, or pip's --target)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _recorded():
    """The binary as pip recorded it for this package (dist-info RECORD): right
    for a venv, the system, --user and --prefix alike."""
    site = _site()
    try:
        entries = sorted(os.listdir(site))
    except OSError:
        return
    for entry in entries:
        if not (entry.startswith("multinode-") and entry.endswith(".dist-info")):
            continue
        try:
            with open(os.path.join(site, entry, "RECORD"), encoding="utf-8") as record:
                for line in record:
                    path = line.rsplit(",", 2)[0]
                    if os.path.basename(path) == "multinode":
                        yield os.path.normpath(os.path.join(site, path))
        except OSError:
            continue


def _candidates():
    yield from _recorded()
    # pip install --target DIR: DIR/bin (its RECORD names the wrong place).
    yield os.path.join(_site(), "bin", "multinode")
    # A scheme's scripts directory: this environment's, then the user's.
    for scheme in (None, os.name + "_user"):
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if scripts:
            yield os.path.join(scripts, "multinode")


def find_binary():
    """The path of the installed `multinode` binary, or None."""
    for path in _candidates():
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def main():
    binary = find_binary()
    if binary is None:
        sys.stderr.write(
            "multinode: error: the multinode binary is not installed beside this package "
            "(" + os.path.dirname(os.path.abspath(__file__)) + "); "
            "reinstall it: pip install --force-reinstall multinode\n"
        )
        return 127
    try:
        os.execv(binary, [binary] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write("multinode: error: cannot run " + binary + ": " + e.strerror + "\n")
        return 126
    return 0  # not reached: execv replaces this process


if __name__ == "__main__":
    sys.exit(main())
