"""How tpusim's scripts write files: the promises of tpusim's own writer (sw/io/output.h,
docs/robustness.md "Outputs") for report.py and sweep_plots.py.

- `-` is standard output; a target that is not a regular file (a device, a FIFO, one of this
  process's descriptors such as /dev/stdout) is written directly, never replaced.
- A regular file is written to a temporary file beside it and renamed over it; a symlink is
  followed (its target is replaced, the link stays); an existing file keeps its permission bits
  (and, for root, its owner); a new one gets 0666 less the umask.
- An output that is one of the inputs is refused (check_not_input).
- SIGTERM and SIGHUP end the script through SystemExit (install_signal_exit), so the temporary is
  removed on those as on Ctrl-C.
"""
import os
import re
import signal
import stat
import sys
import tempfile

_DESCRIPTOR = re.compile(r"^(/dev/std(in|out|err)|/dev/fd/\d+|/proc/(self|thread-self|\d+)/fd/\d+)$")


def install_signal_exit():
    """SIGTERM and SIGHUP raise SystemExit(128 + signal): `finally` blocks and the writer's
    clean-up run, and the exit status says which signal ended the script."""
    def leave(sig, _frame):
        raise SystemExit(128 + sig)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, leave)


def _own_descriptor(path):
    """The descriptor number when `path` names one of this process's descriptors, else None."""
    if path in ("-", "/dev/stdout"):
        return 1
    if path == "/dev/stderr":
        return 2
    m = re.match(r"^/(dev/fd|proc/self/fd|proc/thread-self/fd)/(\d+)$", path)
    if m:
        return int(m.group(2))
    m = re.match(r"^/proc/(\d+)/fd/(\d+)$", path)
    if m and int(m.group(1)) == os.getpid():
        return int(m.group(2))
    return None


def _resolve(path):
    """('fd', n) | ('direct', path) | ('file', real path, existing stat or None)."""
    cur = path
    for _ in range(41):
        fd = _own_descriptor(cur)
        if fd is not None:
            return ("fd", fd)
        if _DESCRIPTOR.match(cur):
            return ("direct", cur)
        try:
            st = os.lstat(cur)
        except FileNotFoundError:
            return ("file", cur, None)
        if stat.S_ISLNK(st.st_mode):
            link = os.readlink(cur)
            cur = link if os.path.isabs(link) else os.path.join(os.path.dirname(cur) or ".", link)
            continue
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", path)
        if stat.S_ISREG(st.st_mode):
            return ("file", cur, st)
        return ("direct", cur)
    raise OSError(40, "Too many levels of symbolic links", path)


def check_not_input(output, inputs):
    """Raises ValueError naming both when `output` is (or links to) one of `inputs`."""
    if output == "-" or not os.path.exists(output):
        return
    for i in inputs:
        try:
            if os.path.samefile(output, i):
                raise ValueError(f"{output}: the output would overwrite the input {i}; "
                                 "choose another file")
        except FileNotFoundError:
            pass


def write_output(path, data):
    """Writes bytes or text to `path` with the promises above. Raises OSError with the reason."""
    data = data if isinstance(data, bytes) else data.encode("utf-8")
    kind = _resolve(path)
    if kind[0] == "fd":
        sys.stdout.flush()
        view = memoryview(data)
        while view:
            view = view[os.write(kind[1], view):]
        return
    if kind[0] == "direct":
        with open(kind[1], "wb") as f:
            f.write(data)
        return
    real, old = kind[1], kind[2]
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(real)),
                               prefix="." + os.path.basename(real)[:200] + ".",
                               suffix=".tpusim-tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if old is not None:
            os.chmod(tmp, stat.S_IMODE(old.st_mode))
            if os.geteuid() == 0:
                try:
                    os.chown(tmp, old.st_uid, old.st_gid)
                except OSError:
                    pass  # a file system without owners: content and mode still hold
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, real)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
